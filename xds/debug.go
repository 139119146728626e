package xds

import (
	"encoding/json"
	"net/http"
	"time"
)

// ProxyStatus is one entry of /debug/proxies.
type ProxyStatus struct {
	ID string `json:"id"`
	// Identity is the SPIFFE ID of the proxy's client certificate, when
	// the xDS port requires one.
	Identity string `json:"identity,omitempty"`
	// Kind is grpc, envoy or ztunnel (other when the hub cannot tell).
	Kind        string                `json:"kind"`
	Cluster     string                `json:"cluster,omitempty"`
	Network     string                `json:"network,omitempty"`
	Locality    string                `json:"locality,omitempty"`
	Delta       bool                  `json:"delta"`
	ConnectedAt time.Time             `json:"connectedAt"`
	Types       map[string]TypeStatus `json:"types"`
}

// Sync states of a proxy's type.
const (
	// StateSynced: the proxy ACKed the newest state of what it watches.
	StateSynced = "SYNCED"
	// StateStale: something it watches changed since its last ACK (sent
	// and not yet ACKed, or not sent yet).
	StateStale = "STALE"
	// StateNacked: it rejected the last response it answered.
	StateNacked = "NACKED"
)

// TypeStatus is what a proxy holds of one type.
type TypeStatus struct {
	State      string    `json:"state"`
	Subscribed int       `json:"subscribed"`
	Wildcard   bool      `json:"wildcard,omitempty"`
	LastSent   time.Time `json:"lastSent,omitzero"`
	LastAck    time.Time `json:"lastAck,omitzero"`
	LastNack   time.Time `json:"lastNack,omitzero"`
	NackReason string    `json:"nackReason,omitempty"`
	Nacks      int       `json:"nacks"`
	// SentVersion and AckedVersion are the set versions of the last
	// response sent and of the last one the proxy ACKed.
	SentVersion  string `json:"sentVersion,omitempty"`
	AckedVersion string `json:"ackedVersion,omitempty"`
	// BehindSeconds is, for a STALE type, how long ago a spoke observed
	// the oldest change the proxy has yet to ACK (0 when unknown).
	BehindSeconds float64 `json:"behindSeconds,omitempty"`
}

// Proxies returns the connected proxies, sorted by ID, with each type's
// sync state.
func (s *Server) Proxies() []ProxyStatus { return s.proxies.status() }

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
