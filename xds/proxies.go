package xds

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/translate"
)

// streamID names a stream: each handler numbers its streams from 1.
type streamID struct {
	delta bool
	id    int64
}

// proxies is the book of connected proxies and of the views they use.
// Stream handlers write it from gRPC's goroutines; the push loop reads
// the views.
type proxies struct {
	log      *slog.Logger
	metrics  *metrics
	auth     *streamAuth
	clusters atomic.Pointer[[]*clusterset.ClusterInfo] // of the last pushed snapshot
	// sets tells which revision of a set a proxy's ACK names (the
	// cache), and whether a proxy is behind; nil times nothing.
	sets setRevisions
	now  func() time.Time

	mu      sync.Mutex
	idents  map[streamID]*url.URL // open streams' peer identities, when required
	streams map[streamID]*proxyState
	nodes   map[string]*proxyState // node ID → the latest stream of that proxy
	inUse   map[translate.View]int // views some proxy uses → how many streams
	sorted  []translate.View       // inUse's views, sorted; nil after a change
	wake    chan struct{}          // has a value when the views in use changed
}

// setRevisions is what the book asks of the cache about the sets proxies
// hold ([Cache] is one).
type setRevisions interface {
	Acked(typeURL, view string, from uint64, version string, touches func(names []string) bool) (rev uint64, observed []time.Time, ok bool)
	Behind(typeURL, view string, rev uint64, touches func(names []string) bool) (behind bool, since time.Time)
}

var _ setRevisions = (*Cache)(nil)

// newProxies returns an empty book over the sets of cache (nil: none).
func newProxies(m *metrics, log *slog.Logger, auth *streamAuth, sets setRevisions) *proxies {
	return &proxies{
		log: log, metrics: m, auth: auth, sets: sets, idents: map[streamID]*url.URL{}, now: time.Now,
		streams: map[streamID]*proxyState{}, nodes: map[string]*proxyState{}, inUse: map[translate.View]int{},
		wake: make(chan struct{}, 1),
	}
}

// proxyState is what /debug/proxies shows of one stream.
type proxyState struct {
	Proxy
	identity *url.URL // nil when identities are not required
	// Kind is grpc, envoy or ztunnel (other when the hub cannot tell).
	Kind        string                `json:"kind"`
	Delta       bool                  `json:"delta"`
	ConnectedAt time.Time             `json:"connectedAt"`
	Types       map[string]*typeState `json:"types"`
	views       []translate.View      // the shared views this stream holds
}

// Proxy kinds, the label of the propagation metrics.
const (
	kindGRPC    = "grpc"
	kindEnvoy   = "envoy"
	kindZtunnel = "ztunnel"
	kindOther   = "other"
)

// proxyKind tells what a proxy is from its node's user agent, and, for a
// node that says nothing, from the types it watches (only ztunnel asks for
// workload addresses).
func proxyKind(node *adspb.Node, typeURL string) string {
	ua := strings.ToLower(node.GetUserAgentName())
	switch {
	case isProxyless(node):
		return kindGRPC
	case ua == "envoy":
		return kindEnvoy
	case strings.Contains(ua, "ztunnel") || typeURL == translate.AddressType:
		return kindZtunnel
	}
	return kindOther
}

type typeState struct {
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

	view string // the set the type is answered from
	// names are the subscribed names (nil for a wildcard subscription):
	// only a change to one of them is the proxy's to receive.
	names map[string]struct{}
	// acked is the set revision the proxy ACKed (0: none yet, or not
	// known); nonces maps the nonces of delta responses in flight to
	// their versions.
	acked  uint64
	nonces map[string]string
}

// touches reports whether a revision that changed names changed
// something the type's subscription watches.
func (t *typeState) touches(names []string) bool {
	if t.names == nil {
		return true
	}
	for _, n := range names {
		if _, ok := t.names[n]; ok {
			return true
		}
	}
	return false
}

// maxNonces bounds the delta responses a type remembers in flight: a proxy
// ACKs them in order, and one that never does must not grow the map.
const maxNonces = 8

// setClusters records the clusters of the snapshot being pushed: a proxy
// that names its cluster but no network is on that cluster's network.
func (p *proxies) setClusters(c []*clusterset.ClusterInfo) { p.clusters.Store(&c) }

func (p *proxies) hasClusters() bool { return p.clusters.Load() != nil }

func (p *proxies) proxyFromNode(node *adspb.Node) (Proxy, error) {
	return ProxyFromNode(node, p.knownClusters())
}

func (p *proxies) knownClusters() []*clusterset.ClusterInfo {
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

// requestState is what the book reads of one request.
type requestState struct {
	// names are the names the type's subscription holds after the
	// request: the stream's own map, which it replaces and never
	// modifies. wildcard subscribes to everything besides.
	names    map[string]struct{}
	wildcard bool
	// nonce answers a response; version is the version it ACKs (state
	// of the world: the request says it; delta: the response's).
	nonce, version string
	nack           *adspb.Status
}

// request records a request and returns the stream's proxy; the first
// request of a stream registers it, once its identity may make its node's
// claims. An ACK is timed: every change a spoke observed that the ACKed
// response brought the proxy is one observation of the propagation time.
func (p *proxies) request(id streamID, node *adspb.Node, typeURL string, r requestState) (Proxy, error) {
	nonce, nack := r.nonce, r.nack
	if err := p.auth.checkType(node, typeURL); err != nil {
		return Proxy{}, err
	}
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
		ps = &proxyState{Proxy: proxy, identity: ident, Kind: proxyKind(node, typeURL), Delta: id.delta, ConnectedAt: p.now(), Types: map[string]*typeState{}}
		p.streams[id] = ps
		p.nodes[proxy.ID] = ps
		p.metrics.proxies.Inc()
		p.log.Debug("proxy connected", "proxy", proxy.ID, "identity", urlString(ident),
			"cluster", proxy.Cluster, "network", proxy.Network, "delta", id.delta)
	}
	if ps.Kind == kindOther && typeURL == translate.AddressType {
		ps.Kind = kindZtunnel
	}
	t := ps.Types[typeURL]
	if t == nil {
		t = &typeState{}
		ps.Types[typeURL] = t
		if translate.PerView(typeURL) {
			t.view = translate.ViewFor(typeURL, ps.View()).Key
		}
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
	t.Subscribed, t.Wildcard, t.names = len(r.names), r.wildcard, r.names
	if r.wildcard {
		t.names = nil // every name
	}
	switch {
	case nack != nil:
		t.LastNack, t.NackReason = p.now(), nack.GetMessage()
		t.Nacks++
		delete(t.nonces, nonce)
		p.metrics.nacks.WithLabelValues(typeURL).Inc()
		p.log.Warn("proxy rejected a response", "proxy", ps.ID, "cluster", ps.Cluster, "type", typeURL, "nonce", nonce, "reason", nack.GetMessage())
	case nonce != "":
		now := p.now()
		t.LastAck = now
		version := r.version
		if id.delta {
			version = t.nonces[nonce]
			delete(t.nonces, nonce)
		}
		if version != "" {
			p.ackedLocked(ps, typeURL, t, version, now)
		}
	}
	return ps.Proxy, nil
}

// ackedLocked records that a proxy holds version of a type's set, and
// times the changes it brought. The first ACK of a stream only sets the
// mark: what a proxy gets when it connects is its initial state, not a
// change that propagated. Callers hold p.mu.
func (p *proxies) ackedLocked(ps *proxyState, typeURL string, t *typeState, version string, now time.Time) {
	t.AckedVersion = version
	if p.sets == nil {
		return
	}
	rev, observed, ok := p.sets.Acked(typeURL, t.view, t.acked, version, t.touches)
	if !ok {
		return
	}
	if t.acked != 0 && rev > t.acked {
		h := p.metrics.propagation.WithLabelValues(typeLabel(typeURL), ps.Kind)
		for _, o := range observed {
			h.Observe(max(now.Sub(o), 0).Seconds())
		}
	}
	if rev > t.acked {
		t.acked = rev
	}
}

// subscribed returns the names a proxy's stream subscribes of a type, or
// all for a wildcard subscription. An unknown proxy or type subscribes
// nothing.
func (p *proxies) subscribed(proxyID, typeURL string) (names []string, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.nodes[proxyID]
	if ps == nil || ps.Types[typeURL] == nil {
		return nil, false
	}
	if t := ps.Types[typeURL]; t.names != nil {
		return slices.Sorted(maps.Keys(t.names)), false
	}
	return nil, true
}

// typeLabel is a type URL's message name, the type label of metrics:
// Cluster, ClusterLoadAssignment, Listener, RouteConfiguration, Address,
// Authorization.
func typeLabel(typeURL string) string {
	return typeURL[strings.LastIndexByte(typeURL, '.')+1:]
}

// sent records a response: its version, and for a delta stream its nonce,
// by which the proxy ACKs it.
func (p *proxies) sent(id streamID, typeURL, nonce, version string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps, ok := p.streams[id]
	if !ok {
		return
	}
	t := ps.Types[typeURL]
	if t == nil {
		return
	}
	t.LastSent, t.SentVersion = p.now(), version
	if id.delta {
		if t.nonces == nil {
			t.nonces = map[string]string{}
		}
		if len(t.nonces) >= maxNonces {
			clear(t.nonces) // a proxy that ACKs nothing: start over
		}
		t.nonces[nonce] = version
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

// status returns the connected proxies, sorted by ID, with each type's
// sync state: what the book holds, and from the sets, whether a proxy
// lacks a change it watches.
func (p *proxies) status() []ProxyStatus {
	type pending struct {
		proxy         int
		typeURL, view string
		acked         uint64
		watch         *typeState // what Behind reads: names, replaced and never changed
		status        TypeStatus
	}
	pp := p
	var todo []pending
	pp.mu.Lock()
	out := make([]ProxyStatus, 0, len(pp.streams))
	for _, st := range pp.streams {
		ps := ProxyStatus{
			ID: st.ID, Identity: urlString(st.identity), Kind: st.Kind, Cluster: string(st.Cluster), Network: string(st.Network), Delta: st.Delta,
			ConnectedAt: st.ConnectedAt, Types: make(map[string]TypeStatus, len(st.Types)),
		}
		if l := st.Locality; l != (resources.Locality{}) {
			ps.Locality = l.Region + "/" + l.Zone + "/" + l.Subzone
		}
		for k, t := range st.Types {
			todo = append(todo, pending{proxy: len(out), typeURL: k, view: t.view, acked: t.acked, watch: &typeState{names: t.names}, status: TypeStatus{
				Subscribed: t.Subscribed, Wildcard: t.Wildcard, LastSent: t.LastSent, LastAck: t.LastAck, LastNack: t.LastNack,
				NackReason: t.NackReason, Nacks: t.Nacks, SentVersion: t.SentVersion, AckedVersion: t.AckedVersion,
			}})
		}
		out = append(out, ps)
	}
	pp.mu.Unlock()
	// The cache is asked without the book's lock.
	now := pp.now()
	for _, d := range todo {
		ts := d.status
		switch {
		case !ts.LastNack.IsZero() && ts.LastNack.After(ts.LastAck):
			ts.State = StateNacked
		case ts.SentVersion != ts.AckedVersion:
			ts.State = StateStale
		default:
			ts.State = StateSynced
		}
		if ts.State != StateNacked && d.acked != 0 && pp.sets != nil {
			if behind, since := pp.sets.Behind(d.typeURL, d.view, d.acked, d.watch.touches); behind {
				ts.State = StateStale
				if !since.IsZero() {
					ts.BehindSeconds = max(now.Sub(since), 0).Seconds()
				}
			}
		}
		out[d.proxy].Types[d.typeURL] = ts
	}
	slices.SortFunc(out, func(a, b ProxyStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
