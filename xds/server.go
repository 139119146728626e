package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpconfig "github.com/envoyproxy/go-control-plane/pkg/server/config"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/grpccodec"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/workloads"
)

// Config configures the xDS server.
type Config struct {
	// Addr is where proxies connect.
	Addr string
	// TrustDomain is the workloads' trust domain when their cluster names none.
	TrustDomain string
	// PushInterval is the adaptive debounce: a change after a quiet period
	// is pushed at once; changes closer together than this coalesce into
	// one push per interval.
	PushInterval time.Duration
	// TLS, when set, secures the xDS port.
	TLS *tls.Config
	// MaxMessageBytes bounds messages in both directions.
	MaxMessageBytes int
	// Warm, when set, returns the first snapshot to serve once the
	// registry is complete enough to serve (it is given the current one).
	// Until then proxies connect but get no response, and keep the
	// configuration they have: after a restart, a hub that answered at
	// once would send a clusterset with its spokes still reconnecting.
	Warm func(ctx context.Context, current Snapshot) Snapshot
}

// Server serves the registry to proxies over ADS.
type Server struct {
	cfg     Config
	log     *slog.Logger
	cache   *Cache
	metrics *metrics
	lis     net.Listener
	grpc    *grpc.Server

	clusters atomic.Pointer[[]*federation.ClusterInfo] // of the last pushed snapshot

	mu      sync.Mutex
	proxies map[streamID]*proxyState
	nodes   map[string]*proxyState // node ID → the latest stream of that proxy
	views   map[viewKey]*viewState // views some proxy uses
	wake    chan struct{}          // the push loop has views to build or drop
	// ready is closed once the first snapshot is pushed: a stream's
	// requests wait for it, since a proxy's network may come from the
	// clusters it knows. stopping is Run's ctx.Done().
	ready    chan struct{}
	stopping <-chan struct{}

	// Owned by the push loop.
	generated map[string]*generatedNames // service key → names it produced
	built     map[viewKey]*viewState     // views whose sets are built
	gateways  map[federation.NetworkID][]*federationpb.Gateway
	networks  map[federation.ClusterID]federation.NetworkID
	addresses *workloads.Builder
	addrItems map[string]addrItem // current workload API resources
}

// viewKey names a set of one type that some proxies share: EDS per view
// (network and locality), workload addresses per network.
type viewKey struct {
	typeURL string
	key     string
}

// addrItem is a workload API resource: its name and scope (the item's
// Message dropped once encoded), and its encoding; nil when it was removed.
type addrItem struct {
	item    workloads.Item
	encoded *Encoded
}

type generatedNames struct {
	clusters  []string // also the route and EDS names
	listeners []string
	// shape is what CDS, LDS and RDS depend on (hostnames and ports), so
	// that an endpoint-only change skips them.
	shape string
}

// shapeOf fingerprints what a service's CDS, LDS and RDS are made of.
func shapeOf(v *federation.ServiceView) string {
	var b strings.Builder
	for _, h := range resources.Hostnames(v) {
		b.WriteString(h + ";")
	}
	for _, p := range resources.Ports(v) {
		fmt.Fprintf(&b, "%s/%d/%d;", p.GetName(), p.GetPort(), p.GetProtocol())
	}
	return b.String()
}

type viewState struct {
	view resources.View // its network alone matters for addresses
	refs int
}

// Type URLs of Istio ambient's workload API.
const (
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// New returns a server listening on cfg.Addr.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if cfg.PushInterval <= 0 {
		cfg.PushInterval = 10 * time.Millisecond
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 200 << 20
	}
	s := &Server{
		cfg:       cfg,
		log:       log,
		proxies:   map[streamID]*proxyState{},
		nodes:     map[string]*proxyState{},
		views:     map[viewKey]*viewState{},
		wake:      make(chan struct{}, 1),
		ready:     make(chan struct{}),
		generated: map[string]*generatedNames{},
		built:     map[viewKey]*viewState{},
		addresses: workloads.NewBuilder(cfg.TrustDomain),
		addrItems: map[string]addrItem{},
	}
	s.cache = NewCache(s.viewOf)
	s.metrics = newMetrics(reg, s)
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("xds listener: %w", err)
	}
	s.lis = lis
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Cache exposes the server's cache (for benchmarks and debugging).
func (s *Server) Cache() *Cache { return s.cache }

// Run serves proxies and pushes every registry change from initial on,
// until ctx ends.
func (s *Server) Run(ctx context.Context, initial Snapshot) error {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(s.cfg.MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Stop waits for the stream handlers, so that none outlives Run.
		grpc.WaitForHandlers(true),
		grpc.ForceServerCodecV2(grpccodec.Codec{}),
	}
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS)))
	}
	s.grpc = grpc.NewServer(opts...)
	// grpc-go's clients never mean "everything" by an empty EDS or RDS
	// request; Envoy's LDS/CDS and ztunnel do.
	srv := gcpserver.NewServer(ctx, s.cache, s.callbacks(),
		gcpconfig.DeactivateLegacyWildcardForTypes([]string{resourcev3.EndpointType, resourcev3.RouteType}))
	discovery.RegisterAggregatedDiscoveryServiceServer(s.grpc, srv)

	s.stopping = ctx.Done()
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(s.lis) }()
	if s.cfg.Warm != nil {
		start := time.Now()
		initial = s.cfg.Warm(ctx, initial)
		s.log.Info("xds warm", "after", time.Since(start).Round(time.Millisecond))
	}
	if ctx.Err() == nil {
		// Authorization policies are not federated yet, but ztunnel is not
		// ready before it has a response for them.
		s.update(AuthorizationType, "", nil, nil)
		s.push(initial, nil, nil, true)
		close(s.ready)
		s.log.Info("xds serving", "addr", s.Addr().String(), "tls", s.cfg.TLS != nil)
		s.loop(ctx, initial)
	}
	s.grpc.Stop()
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("xds server: %w", err)
	}
	return nil
}

// loop pushes registry changes, coalescing those that come faster than
// PushInterval, and builds the EDS of views proxies start to use.
func (s *Server) loop(ctx context.Context, snap Snapshot) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
			s.syncViews(snap)
			continue
		case <-snap.Done():
		}
		if wait := s.cfg.PushInterval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		changed := map[string]struct{}{}
		var workloadKeys []string
		for next := snap.Next(); next != nil; next = snap.Next() {
			snap = next
			ch := snap.Changes()
			for _, k := range ch.Services {
				changed[k] = struct{}{}
			}
			workloadKeys = append(workloadKeys, ch.Workloads...)
		}
		// The interval runs from the start of a push, so that changes that
		// come slower than one per interval are each pushed at once.
		last = time.Now()
		s.push(snap, changed, workloadKeys, false)
		s.metrics.pushes.Inc()
		s.metrics.pushTime.Observe(time.Since(last).Seconds())
	}
}

// push regenerates what changed. all regenerates everything.
func (s *Server) push(snap Snapshot, changed map[string]struct{}, workloadKeys []string, all bool) {
	clusters := snap.Clusters()
	s.clusters.Store(&clusters)
	gateways := resources.GatewaysByNetwork(clusters, federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS)
	networks := map[federation.ClusterID]federation.NetworkID{}
	for _, c := range clusters {
		networks[c.ID] = c.Network
	}
	allEDS := all || !maps.EqualFunc(gateways, s.gateways, func(a, b []*federationpb.Gateway) bool {
		return slices.EqualFunc(a, b, func(x, y *federationpb.Gateway) bool { return proto.Equal(x, y) })
	}) || !maps.Equal(networks, s.networks)
	s.gateways, s.networks = gateways, networks

	if all {
		changed = map[string]struct{}{}
		for k := range s.generated {
			changed[k] = struct{}{}
		}
		for _, v := range snap.Services() {
			changed[v.Key] = struct{}{}
		}
	}
	shared := map[string]map[string]proto.Message{
		resourcev3.ClusterType: {}, resourcev3.ListenerType: {}, resourcev3.RouteType: {},
	}
	removed := map[string][]string{}
	for key := range changed {
		v, ok := snap.Service(key)
		old := s.generated[key]
		if ok && old != nil && old.shape == shapeOf(v) {
			continue // only endpoints changed: CDS, LDS and RDS stand
		}
		now := &generatedNames{}
		if ok {
			now.shape = shapeOf(v)
			for _, c := range resources.Clusters(v) {
				shared[resourcev3.ClusterType][c.GetName()] = c
				now.clusters = append(now.clusters, c.GetName())
			}
			for _, l := range resources.Listeners(v) {
				shared[resourcev3.ListenerType][l.GetName()] = l
				now.listeners = append(now.listeners, l.GetName())
			}
			for _, r := range resources.Routes(v) {
				shared[resourcev3.RouteType][r.GetName()] = r
			}
			s.generated[key] = now
		} else {
			delete(s.generated, key)
		}
		if old != nil {
			gone := without(old.clusters, now.clusters)
			removed[resourcev3.ClusterType] = append(removed[resourcev3.ClusterType], gone...)
			removed[resourcev3.RouteType] = append(removed[resourcev3.RouteType], gone...)
			removed[resourcev3.EndpointType] = append(removed[resourcev3.EndpointType], gone...)
			removed[resourcev3.ListenerType] = append(removed[resourcev3.ListenerType], without(old.listeners, now.listeners)...)
		}
	}
	// Clusters before endpoints, listeners before routes: the order Envoy
	// wants to avoid dropping traffic.
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.RouteType} {
		s.update(typ, "", shared[typ], removed[typ])
	}
	edsKeys := changed
	if allEDS {
		edsKeys = map[string]struct{}{}
		for k := range s.generated {
			edsKeys[k] = struct{}{}
		}
	}
	assignments := s.newAssignments(snap)
	for k, v := range s.built {
		if k.typeURL == resourcev3.EndpointType {
			s.cache.Apply(resourcev3.EndpointType, k.key, assignments.of(edsKeys, v.view), removed[resourcev3.EndpointType])
		}
	}
	s.pushAddresses(snap, slices.Collect(maps.Keys(changed)), workloadKeys, all)
}

// pushAddresses regenerates the workload API resources a change touches,
// encodes each once and hands it to the networks that see it.
func (s *Server) pushAddresses(snap Snapshot, services, workloadKeys []string, all bool) {
	items := s.addresses.Push(snap, services, workloadKeys, all)
	if len(items) == 0 {
		return
	}
	var changed []addrItem
	for _, it := range items {
		if it.Message == nil {
			delete(s.addrItems, it.Name)
			changed = append(changed, addrItem{item: it})
			continue
		}
		ai, ok := s.encodeAddress(it)
		if !ok {
			continue
		}
		if old, had := s.addrItems[it.Name]; had && old.encoded.version == ai.encoded.version && sameScope(old.item, it) {
			continue
		}
		s.addrItems[it.Name] = ai
		changed = append(changed, ai)
	}
	for k, v := range s.built {
		if k.typeURL != AddressType {
			continue
		}
		var upserts []*Encoded
		var removals []string
		for _, ai := range changed {
			if ai.encoded != nil && ai.item.InScope(v.view.Network) {
				upserts = append(upserts, ai.encoded)
			} else {
				removals = append(removals, ai.item.Name)
			}
		}
		s.cache.Apply(AddressType, k.key, upserts, removals)
	}
}

// encodeAddress encodes an item at once, whether or not a ztunnel is
// connected, and keeps only the encoding: it is a third of the message's
// size, and a hub holds one per workload.
func (s *Server) encodeAddress(it workloads.Item) (addrItem, bool) {
	e, err := s.cache.Encode(AddressType, it.Name, it.Message)
	if err != nil {
		s.log.Error("encode workload address", "name", it.Name, "err", err)
		return addrItem{}, false
	}
	it.Message = nil
	return addrItem{item: it, encoded: e}, true
}

func sameScope(a, b workloads.Item) bool {
	eq := func(x, y *federation.NetworkID) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.Only, b.Only) && eq(a.Except, b.Except)
}

// update applies changes to a set; with none it only makes sure the set
// exists (so that its watches are answered).
func (s *Server) update(typ, view string, upserts map[string]proto.Message, removals []string) {
	if _, err := s.cache.Update(typ, view, upserts, removals); err != nil {
		s.log.Error("xds update failed", "type", typ, "view", view, "err", err)
	}
}

// assignments builds the load assignments of one push, each encoded once
// however many views get it: views whose AssignmentKey for a service is
// the same share its encodings (a clusterset's proxies in a hundred zones
// see a service in a handful of ways).
type assignments struct {
	s     *Server
	snap  Snapshot
	locs  map[string][]resources.Locality // by service key
	built map[string][]*Encoded           // by service key and AssignmentKey
}

func (s *Server) newAssignments(snap Snapshot) *assignments {
	return &assignments{s: s, snap: snap, locs: map[string][]resources.Locality{}, built: map[string][]*Encoded{}}
}

// of returns the assignments of the services keys for view.
func (a *assignments) of(keys map[string]struct{}, view resources.View) []*Encoded {
	var out []*Encoded
	for key := range keys {
		v, ok := a.snap.Service(key)
		if !ok {
			continue
		}
		locs, ok := a.locs[key]
		if !ok {
			locs = resources.Localities(v)
			a.locs[key] = locs
		}
		id := key + "\x00" + resources.AssignmentKey(locs, view)
		enc, ok := a.built[id]
		if !ok {
			enc = a.build(v, view)
			a.built[id] = enc
		}
		out = append(out, enc...)
	}
	return out
}

func (a *assignments) build(v *federation.ServiceView, view resources.View) []*Encoded {
	var out []*Encoded
	for _, host := range resources.Hostnames(v) {
		for _, p := range resources.Ports(v) {
			b := resources.EncodeLoadAssignment(v, host, p, view, a.s.gateways)
			out = append(out, a.s.cache.Encoded(resourcev3.EndpointType, resources.ClusterName(p.GetPort(), host), b))
		}
	}
	return out
}

// syncViews builds the sets of new views and drops unused ones.
func (s *Server) syncViews(snap Snapshot) {
	s.mu.Lock()
	want := map[viewKey]*viewState{}
	for k, v := range s.views {
		want[k] = &viewState{view: v.view}
	}
	s.mu.Unlock()
	for k := range s.built {
		if _, ok := want[k]; !ok {
			delete(s.built, k)
			s.cache.DropView(k.typeURL, k.key)
		}
	}
	services := map[string]struct{}{}
	for k := range s.generated {
		services[k] = struct{}{}
	}
	var assignments *assignments
	for k, v := range want {
		if _, ok := s.built[k]; ok {
			continue
		}
		s.built[k] = v
		switch k.typeURL {
		case resourcev3.EndpointType:
			if assignments == nil {
				assignments = s.newAssignments(snap)
			}
			s.cache.Apply(resourcev3.EndpointType, k.key, assignments.of(services, v.view), nil)
		case AddressType:
			var upserts []*Encoded
			for _, ai := range s.addrItems {
				if ai.item.InScope(v.view.Network) {
					upserts = append(upserts, ai.encoded)
				}
			}
			s.cache.Apply(AddressType, k.key, upserts, nil)
		}
	}
}

// without returns the names in a that are not in b.
func without(a, b []string) []string {
	var out []string
	for _, n := range a {
		if !slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	return out
}

// viewOf maps a request to the set that answers it: EDS by the proxy's
// view, everything else shared.
func (s *Server) viewOf(typeURL string, req proto.Message) string {
	if typeURL != resourcev3.EndpointType && typeURL != AddressType {
		return ""
	}
	var node *core.Node
	switch r := req.(type) {
	case *discovery.DiscoveryRequest:
		node = r.GetNode()
	case *discovery.DeltaDiscoveryRequest:
		node = r.GetNode()
	}
	s.mu.Lock()
	p := s.nodes[node.GetId()]
	s.mu.Unlock()
	if p != nil {
		return viewFor(typeURL, p.Proxy).key
	}
	var clusters []*federation.ClusterInfo
	if c := s.clusters.Load(); c != nil {
		clusters = *c
	}
	proxy, err := ProxyFromNode(node, clusters)
	if err != nil {
		return ""
	}
	return viewFor(typeURL, proxy).key
}

// viewFor is the view of a type that a proxy shares with others.
func viewFor(typeURL string, p Proxy) viewKey {
	switch typeURL {
	case resourcev3.EndpointType:
		return viewKey{typeURL, p.View().Key()}
	case AddressType:
		return viewKey{typeURL, string(p.Network)}
	}
	return viewKey{typeURL, ""}
}
