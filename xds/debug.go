package xds

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/meshfed/meshfed/xds/resources"
)

// ProxyStatus is one entry of /debug/proxies.
type ProxyStatus struct {
	ID string `json:"id"`
	// Identity is the SPIFFE ID of the proxy's client certificate, when
	// the xDS port requires one.
	Identity    string               `json:"identity,omitempty"`
	Cluster     string               `json:"cluster,omitempty"`
	Network     string               `json:"network,omitempty"`
	Locality    string               `json:"locality,omitempty"`
	Delta       bool                 `json:"delta"`
	ConnectedAt time.Time            `json:"connectedAt"`
	Types       map[string]typeState `json:"types"`
}

// Proxies returns the connected proxies, sorted by ID.
func (s *Server) Proxies() []ProxyStatus {
	pp := s.proxies
	pp.mu.Lock()
	defer pp.mu.Unlock()
	out := make([]ProxyStatus, 0, len(pp.streams))
	for _, p := range pp.streams {
		ps := ProxyStatus{
			ID: p.ID, Identity: urlString(p.identity), Cluster: string(p.Cluster), Network: string(p.Network), Delta: p.Delta, ConnectedAt: p.ConnectedAt,
			Types: make(map[string]typeState, len(p.Types)),
		}
		if l := p.Locality; l != (resources.Locality{}) {
			ps.Locality = l.Region + "/" + l.Zone + "/" + l.Subzone
		}
		for k, t := range p.Types {
			ps.Types[k] = *t
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b ProxyStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// ProxiesHandler serves /debug/proxies.
func (s *Server) ProxiesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Proxies []ProxyStatus `json:"proxies"`
		}{s.Proxies()})
	})
}

// SetsHandler serves /debug/xds: every set the server serves (type, view,
// version, size), or with ?type=URL&view=KEY the versions of one set's
// resources by name.
func (s *Server) SetsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v any
		if typ := r.URL.Query().Get("type"); typ != "" {
			res := s.Resources(typ, r.URL.Query().Get("view"))
			if res == nil {
				http.Error(w, "no such set", http.StatusNotFound)
				return
			}
			v = struct {
				Resources map[string]string `json:"resources"`
			}{res}
		} else {
			v = struct {
				Sets []SetStatus `json:"sets"`
			}{s.cache.Sets()}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	})
}

// Resources returns the versions of one set's resources by name (nil when
// the server has no such set): what a proxy of that view is served.
func (s *Server) Resources(typeURL, view string) map[string]string {
	return s.cache.Resources(typeURL, view)
}
