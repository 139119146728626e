package xds

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/xds/resources"
)

// streamID names a stream: go-control-plane numbers state-of-the-world
// and delta streams separately.
type streamID struct {
	delta bool
	id    int64
}

// proxyState is what /debug/proxies shows of one stream.
type proxyState struct {
	Proxy
	Delta       bool                  `json:"delta"`
	ConnectedAt time.Time             `json:"connectedAt"`
	Types       map[string]*typeState `json:"types"`
	views       []viewKey             // the shared views this stream holds
	nodes       []*core.Node
}

type typeState struct {
	Subscribed int       `json:"subscribed"`
	Wildcard   bool      `json:"wildcard,omitempty"`
	LastSent   time.Time `json:"lastSent,omitzero"`
	LastAck    time.Time `json:"lastAck,omitzero"`
	LastNack   time.Time `json:"lastNack,omitzero"`
	NackReason string    `json:"nackReason,omitempty"`
	Nacks      int       `json:"nacks"`
}

func (s *Server) callbacks() gcpserver.Callbacks {
	return gcpserver.CallbackFuncs{
		StreamClosedFunc: func(id int64, _ *core.Node) { s.closed(streamID{false, id}) },
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			return s.request(streamID{false, id}, req.GetNode(), req.GetTypeUrl(), len(req.GetResourceNames()),
				len(req.GetResourceNames()) == 0, req.GetResponseNonce(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discovery.DiscoveryRequest, _ *discovery.DiscoveryResponse) {
			s.sent(streamID{false, id}, req.GetTypeUrl())
		},
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) { s.closed(streamID{true, id}) },
		StreamDeltaRequestFunc: func(id int64, req *discovery.DeltaDiscoveryRequest) error {
			return s.request(streamID{true, id}, req.GetNode(), req.GetTypeUrl(), len(req.GetResourceNamesSubscribe()),
				false, req.GetResponseNonce(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
		},
		StreamDeltaResponseFunc: func(id int64, req *discovery.DeltaDiscoveryRequest, _ *discovery.DeltaDiscoveryResponse) {
			s.sent(streamID{true, id}, req.GetTypeUrl())
		},
	}
}

// request records a request; the first one of a stream registers the proxy.
func (s *Server) request(id streamID, node *core.Node, typeURL string, names int, wildcard bool, nonce, nack string, isNack bool) error {
	select {
	case <-s.ready:
	case <-s.stopping:
		return errors.New("xds server stopping")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.proxies[id]
	if !ok {
		var clusters []*federation.ClusterInfo
		if c := s.clusters.Load(); c != nil {
			clusters = *c
		}
		proxy, err := ProxyFromNode(node, clusters)
		if err != nil {
			s.log.Warn("proxy refused", "err", err)
			return err
		}
		p = &proxyState{Proxy: proxy, Delta: id.delta, ConnectedAt: time.Now(), Types: map[string]*typeState{}}
		s.proxies[id] = p
		s.nodes[proxy.ID] = p
		s.metrics.proxies.Inc()
		s.log.Debug("proxy connected", "proxy", proxy.ID, "cluster", proxy.Cluster, "network", proxy.Network, "delta", id.delta)
	}
	t := p.Types[typeURL]
	if t == nil {
		t = &typeState{}
		p.Types[typeURL] = t
		// The first request of a per-view type: hold the view, so that the
		// push loop builds it if nobody else uses it yet.
		if typeURL == resourcev3.EndpointType || typeURL == AddressType {
			vk := viewFor(typeURL, p.Proxy)
			v := s.views[vk]
			if v == nil {
				v = &viewState{view: p.View()}
				s.views[vk] = v
				s.signal()
			}
			v.refs++
			p.views = append(p.views, vk)
		}
	}
	t.Subscribed, t.Wildcard = names, wildcard && (typeURL == resourcev3.ListenerType || typeURL == resourcev3.ClusterType)
	switch {
	case isNack:
		t.LastNack, t.NackReason = time.Now(), nack
		t.Nacks++
		s.metrics.nacks.WithLabelValues(typeURL).Inc()
		s.log.Warn("proxy rejected a response", "proxy", p.ID, "type", typeURL, "reason", nack)
	case nonce != "":
		t.LastAck = time.Now()
	}
	return nil
}

func (s *Server) sent(id streamID, typeURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.proxies[id]; ok {
		if t := p.Types[typeURL]; t != nil {
			t.LastSent = time.Now()
		}
	}
}

func (s *Server) closed(id streamID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.proxies[id]
	if !ok {
		return
	}
	delete(s.proxies, id)
	if s.nodes[p.ID] == p {
		delete(s.nodes, p.ID)
	}
	for _, vk := range p.views {
		if v := s.views[vk]; v != nil {
			v.refs--
			if v.refs == 0 {
				delete(s.views, vk)
				s.signal()
			}
		}
	}
	s.metrics.proxies.Dec()
}

func (s *Server) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ProxyStatus is one entry of /debug/proxies.
type ProxyStatus struct {
	ID          string               `json:"id"`
	Cluster     string               `json:"cluster,omitempty"`
	Network     string               `json:"network,omitempty"`
	Locality    string               `json:"locality,omitempty"`
	Delta       bool                 `json:"delta"`
	ConnectedAt time.Time            `json:"connectedAt"`
	Types       map[string]typeState `json:"types"`
}

// Proxies returns the connected proxies, sorted by ID.
func (s *Server) Proxies() []ProxyStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ProxyStatus, 0, len(s.proxies))
	for _, p := range s.proxies {
		ps := ProxyStatus{
			ID: p.ID, Cluster: string(p.Cluster), Network: string(p.Network), Delta: p.Delta, ConnectedAt: p.ConnectedAt,
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
