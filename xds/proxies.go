package xds

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/xds/translate"
)

// streamID names a stream: go-control-plane numbers the state-of-the-world
// streams and the delta handler its own, each from 1.
type streamID struct {
	delta bool
	id    int64
}

// proxies is the book of connected proxies and of the views they use.
// Stream callbacks write it from gRPC's goroutines; the push loop reads
// the views.
type proxies struct {
	log      *slog.Logger
	metrics  *metrics
	auth     *streamAuth
	clusters atomic.Pointer[[]*federation.ClusterInfo] // of the last pushed snapshot

	mu      sync.Mutex
	idents  map[streamID]*url.URL // open streams' peer identities, when required
	streams map[streamID]*proxyState
	nodes   map[string]*proxyState // node ID → the latest stream of that proxy
	inUse   map[translate.View]int // views some proxy uses → how many streams
	sorted  []translate.View       // inUse's views, sorted; nil after a change
	wake    chan struct{}          // has a value when the views in use changed
}

func newProxies(m *metrics, log *slog.Logger, auth *streamAuth) *proxies {
	return &proxies{
		log: log, metrics: m, auth: auth, idents: map[streamID]*url.URL{},
		streams: map[streamID]*proxyState{}, nodes: map[string]*proxyState{}, inUse: map[translate.View]int{},
		wake: make(chan struct{}, 1),
	}
}

// proxyState is what /debug/proxies shows of one stream.
type proxyState struct {
	Proxy
	identity    *url.URL              // nil when identities are not required
	Delta       bool                  `json:"delta"`
	ConnectedAt time.Time             `json:"connectedAt"`
	Types       map[string]*typeState `json:"types"`
	views       []translate.View      // the shared views this stream holds
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

// callbacks records state-of-the-world streams in the book once the first
// snapshot is pushed; until then (or once stopping is closed) requests
// wait. Delta streams are the delta handler's.
func (s *Server) callbacks(stopping <-chan struct{}) gcpserver.Callbacks {
	p := s.proxies
	request := func(id streamID, node *core.Node, typeURL string, names int, wildcard bool, nonce string, nack *status.Status) error {
		select {
		case <-s.ready:
		case <-stopping:
			return errors.New("xds server stopping")
		}
		_, err := p.request(id, node, typeURL, names, wildcard, nonce, nack)
		return err
	}
	return gcpserver.CallbackFuncs{
		StreamOpenFunc:   func(ctx context.Context, id int64, _ string) error { return p.opened(ctx, streamID{false, id}) },
		StreamClosedFunc: func(id int64, _ *core.Node) { p.closed(streamID{false, id}) },
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			return request(streamID{false, id}, req.GetNode(), req.GetTypeUrl(), len(req.GetResourceNames()),
				len(req.GetResourceNames()) == 0, req.GetResponseNonce(), req.GetErrorDetail())
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discovery.DiscoveryRequest, _ *discovery.DiscoveryResponse) {
			p.sent(streamID{false, id}, req.GetTypeUrl())
		},
	}
}

// setClusters records the clusters of the snapshot being pushed: a proxy
// that names its cluster but no network is on that cluster's network.
func (p *proxies) setClusters(c []*federation.ClusterInfo) { p.clusters.Store(&c) }

func (p *proxies) hasClusters() bool { return p.clusters.Load() != nil }

func (p *proxies) proxyFromNode(node *core.Node) (Proxy, error) {
	return ProxyFromNode(node, p.knownClusters())
}

func (p *proxies) knownClusters() []*federation.ClusterInfo {
	if c := p.clusters.Load(); c != nil {
		return *c
	}
	return nil
}

// urlString is u's string, "" for nil: a log attribute for an identity
// that may be absent.
func urlString(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.String()
}

// opened records a stream's peer identity, when identities are required;
// a stream whose peer has none is refused. The identity is authorized
// with the proxy's claims on the stream's first request.
func (p *proxies) opened(ctx context.Context, id streamID) error {
	ident, err := p.auth.identify(ctx)
	if err != nil || ident == nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idents[id] = ident
	return nil
}

// request records a request and returns the stream's proxy; the first
// request of a stream registers it, once its identity may make its node's
// claims.
func (p *proxies) request(id streamID, node *core.Node, typeURL string, names int, wildcard bool, nonce string, nack *status.Status) (Proxy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps, ok := p.streams[id]
	if !ok {
		proxy, err := p.proxyFromNode(node)
		if err != nil {
			p.auth.refusals.refuse(refusedInvalidNode, "identity", urlString(p.idents[id]), "err", err)
			return Proxy{}, err
		}
		ident := p.idents[id]
		if err := p.auth.check(ident, proxy, p.knownClusters()); err != nil {
			return Proxy{}, err
		}
		ps = &proxyState{Proxy: proxy, identity: ident, Delta: id.delta, ConnectedAt: time.Now(), Types: map[string]*typeState{}}
		p.streams[id] = ps
		p.nodes[proxy.ID] = ps
		p.metrics.proxies.Inc()
		p.log.Debug("proxy connected", "proxy", proxy.ID, "identity", urlString(ident),
			"cluster", proxy.Cluster, "network", proxy.Network, "delta", id.delta)
	}
	t := ps.Types[typeURL]
	if t == nil {
		t = &typeState{}
		ps.Types[typeURL] = t
		// The first request of a per-view type: hold the view, so that the
		// push loop builds it if nobody else uses it yet.
		if translate.PerView(typeURL) {
			v := translate.ViewFor(typeURL, ps.View())
			if p.inUse[v] == 0 {
				p.signal()
			}
			p.inUse[v]++
			ps.views = append(ps.views, v)
		}
	}
	t.Subscribed, t.Wildcard = names, wildcard && (typeURL == resourcev3.ListenerType || typeURL == resourcev3.ClusterType)
	switch {
	case nack != nil:
		t.LastNack, t.NackReason = time.Now(), nack.GetMessage()
		t.Nacks++
		p.metrics.nacks.WithLabelValues(typeURL).Inc()
		p.log.Warn("proxy rejected a response", "proxy", ps.ID, "type", typeURL, "reason", nack.GetMessage())
	case nonce != "":
		t.LastAck = time.Now()
	}
	return ps.Proxy, nil
}

func (p *proxies) sent(id streamID, typeURL string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps, ok := p.streams[id]; ok {
		if t := ps.Types[typeURL]; t != nil {
			t.LastSent = time.Now()
		}
	}
}

// closed forgets a stream, registered or not.
func (p *proxies) closed(id streamID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.idents, id)
	ps, ok := p.streams[id]
	if !ok {
		return
	}
	delete(p.streams, id)
	if p.nodes[ps.ID] == ps {
		delete(p.nodes, ps.ID)
	}
	for _, v := range ps.views {
		if p.inUse[v]--; p.inUse[v] <= 0 {
			delete(p.inUse, v)
			p.signal()
		}
	}
	p.metrics.proxies.Dec()
}

func (p *proxies) signal() {
	p.sorted = nil
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// viewsChanged has a value when a view came into use or went out of it.
func (p *proxies) viewsChanged() <-chan struct{} { return p.wake }

// views returns the views in use, sorted. Between changes it returns the
// same slice, which callers must not modify: every push asks.
func (p *proxies) views() []translate.View {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sorted == nil {
		p.sorted = slices.SortedFunc(maps.Keys(p.inUse), func(a, b translate.View) int {
			return cmp.Or(cmp.Compare(a.TypeURL, b.TypeURL), cmp.Compare(a.Key, b.Key))
		})
	}
	return p.sorted
}

// viewOf maps a request to the set that answers it: per-view types by the
// proxy's view, everything else shared.
func (p *proxies) viewOf(typeURL string, req proto.Message) string {
	if !translate.PerView(typeURL) {
		return ""
	}
	var node *core.Node
	switch r := req.(type) {
	case *discovery.DiscoveryRequest:
		node = r.GetNode()
	case *discovery.DeltaDiscoveryRequest:
		node = r.GetNode()
	}
	p.mu.Lock()
	ps := p.nodes[node.GetId()]
	p.mu.Unlock()
	if ps != nil {
		return translate.ViewFor(typeURL, ps.View()).Key
	}
	proxy, err := p.proxyFromNode(node)
	if err != nil {
		return ""
	}
	return translate.ViewFor(typeURL, proxy.View()).Key
}
