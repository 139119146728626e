package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/grpccodec"
	"github.com/meshfed/meshfed/internal/liveness"
	"github.com/meshfed/meshfed/xds/translate"
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
	// TLS, when set, secures the xDS port. When it requires and verifies
	// client certificates, each stream's peer identity (the SPIFFE ID of
	// its certificate) is recorded and authorized.
	TLS *tls.Config
	// WrapCreds, when set, wraps the transport credentials made from TLS
	// (to log and count failed handshakes).
	WrapCreds func(credentials.TransportCredentials) credentials.TransportCredentials
	// Authorize decides whether a proxy may be served as its node claims,
	// when TLS requires client certificates; nil is
	// TrustDomainAuthorizer(TrustDomain).
	Authorize Authorizer
	// ClusterNotes, when set, tells explain what the cluster policy last
	// refused of a cluster.
	ClusterNotes ClusterNotes
	// StreamRate is how many new streams a second one source IP address
	// may open once it has spent StreamBurst: 0 is DefaultStreamRate, a
	// negative rate no limit. Loopback addresses are exempt unless
	// LimitLoopback is set.
	StreamRate float64
	// StreamBurst is how many streams one address may open at once; 0 is
	// DefaultStreamBurst.
	StreamBurst int
	// LimitLoopback applies the stream rate limit to loopback peers too.
	LimitLoopback bool
	// MaxMessageBytes bounds messages in both directions.
	MaxMessageBytes int
	// WorkloadAPI serves Istio ambient's workload API (Address and
	// Authorization) to ztunnels. Off, a stream that asks for either is
	// refused: the hub has the clusterset's exported services, not a
	// cluster's own workloads, waypoints or AuthorizationPolicies, and a
	// ztunnel on it would break local traffic and enforce no policy.
	WorkloadAPI bool
	// Clock drives the debounce and the stream rate limit; nil is the
	// real clock.
	Clock clock.Clock
}

// Validate checks what New cannot default.
func (c Config) Validate() error {
	switch {
	case c.StreamBurst < 0:
		return fmt.Errorf("%w: xds stream burst %d is negative", federation.ErrInvalid, c.StreamBurst)
	case math.IsNaN(c.StreamRate):
		return fmt.Errorf("%w: xds stream rate is not a number", federation.ErrInvalid)
	}
	return nil
}

// Type URLs of Istio ambient's workload API.
const (
	AddressType       = translate.AddressType
	AuthorizationType = translate.AuthorizationType
)

// Server serves the clusterset to proxies over ADS. It adapts the
// translator to gRPC: it owns the listener and the ADS stream handlers,
// debounces snapshots into pushes, applies the translator's set
// updates to the cache, and keeps the book of connected proxies.
type Server struct {
	cfg      Config
	log      *slog.Logger
	clock    clock.Clock
	lis      net.Listener
	cache    *Cache
	proxies  *proxies
	metrics  *metrics
	refusals *refusals
	limiter  *streamLimiter        // nil: no limit
	tr       *translate.Translator // owned by the push loop
	encodes  atomic.Int64          // the translator's count, for the metric

	// ready is closed once the first snapshot is pushed: a stream's
	// requests wait for it, since a proxy's network may come from the
	// clusters it knows.
	ready chan struct{}
	// beat shows the push loop turning, for the hub's liveness probe.
	beat liveness.Beat
	// pushed is the snapshot last pushed, for explain.
	pushed lastPushed
}

// New returns a server listening on cfg.Addr.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PushInterval <= 0 {
		cfg.PushInterval = 10 * time.Millisecond
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 200 << 20
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.StreamRate == 0 {
		cfg.StreamRate = DefaultStreamRate
	}
	if cfg.StreamBurst == 0 {
		cfg.StreamBurst = DefaultStreamBurst
	}
	if cfg.Authorize == nil {
		cfg.Authorize = TrustDomainAuthorizer(cfg.TrustDomain)
	}
	s := &Server{cfg: cfg, log: log, clock: cfg.Clock, tr: translate.New(cfg.TrustDomain), ready: make(chan struct{})}
	s.metrics = newMetrics(reg, s.encodes.Load)
	s.refusals = newRefusals(s.metrics.refused, log, cfg.Clock)
	s.limiter = newStreamLimiter(cfg.StreamRate, cfg.StreamBurst, cfg.LimitLoopback, cfg.Clock)
	s.cache = NewCache()
	s.proxies = newProxies(s.metrics, log, &streamAuth{
		required:    cfg.TLS != nil && cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert,
		authorize:   cfg.Authorize,
		refusals:    s.refusals,
		workloadAPI: cfg.WorkloadAPI,
	}, s.cache)
	if reg != nil {
		reg.MustRegister(behindCollector{s})
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("xds listener: %w", err)
	}
	s.lis = lis
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Run serves proxies until ctx ends. Proxies may connect at once, but get
// no response (and keep the configuration they have) until first delivers
// the snapshot to start from: after a restart, a hub that answered at once
// would send a clusterset with its spokes still reconnecting. From that
// snapshot on, the server follows the snapshots' chain.
func (s *Server) Run(ctx context.Context, first <-chan clusterset.Snapshot) error {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(s.cfg.MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Stop waits for the stream handlers, so that none outlives Run.
		grpc.WaitForHandlers(true),
		grpc.ForceServerCodecV2(grpccodec.Codec{}),
		grpc.StreamInterceptor(s.limitStreams),
	}
	if s.cfg.TLS != nil {
		creds := credentials.NewTLS(s.cfg.TLS)
		if s.cfg.WrapCreds != nil {
			creds = s.cfg.WrapCreds(creds)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	g := grpc.NewServer(opts...)
	adspb.RegisterADSServer(g, ads{
		sotw:  &sotwHandler{streamHandler{cache: s.cache, proxies: s.proxies, ready: s.ready, stopping: ctx.Done()}},
		delta: &deltaHandler{streamHandler{cache: s.cache, proxies: s.proxies, ready: s.ready, stopping: ctx.Done()}},
	})

	errc := make(chan error, 1)
	go func() { errc <- g.Serve(s.lis) }()
	s.log.Info("xds listening; proxies wait for the first snapshot", "addr", s.Addr().String(), "tls", s.cfg.TLS != nil,
		"clientCertificates", s.proxies.auth.required)
	select {
	case <-ctx.Done():
	case snap := <-first:
		s.push(snap, clusterset.Changes{})
		close(s.ready)
		s.log.Info("xds serving", "addr", s.Addr().String(), "revision", snap.Revision())
		s.loop(ctx, snap)
	}
	g.Stop()
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("xds server: %w", err)
	}
	return nil
}

// Serving reports whether the first snapshot has been pushed: proxies'
// requests are answered from then on.
func (s *Server) Serving() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// Pushed is closed once the first snapshot has been pushed.
func (s *Server) Pushed() <-chan struct{} { return s.ready }

// Alive reports a push loop that has stopped turning for longer than
// stall: a push that long means the hub serves proxies nothing new.
func (s *Server) Alive(stall time.Duration) error {
	return s.beat.Check("the xDS push loop", s.clock.Now(), stall)
}

// loop pushes the snapshots that follow snap, coalescing those that come
// faster than PushInterval, and builds the sets of views proxies start to
// use.
func (s *Server) loop(ctx context.Context, snap clusterset.Snapshot) {
	var last time.Time
	// An idle loop wakes to beat; a push in progress beats when it ends.
	beat := s.clock.NewTimer(liveness.Interval)
	defer beat.Stop()
	defer s.beat.Stop()
	for {
		s.beat.Beat(s.clock.Now())
		select {
		case <-ctx.Done():
			return
		case <-beat.C():
			beat.Reset(liveness.Interval)
			continue
		case <-s.proxies.viewsChanged():
			s.push(snap, clusterset.Changes{})
			continue
		case <-snap.Done():
		}
		if wait := s.cfg.PushInterval - s.clock.Since(last); wait > 0 {
			t := s.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		var changes clusterset.Changes
		snap, changes = clusterset.Newest(snap)
		// The interval runs from the start of a push, so that changes that
		// come slower than one per interval are each pushed at once.
		last = s.clock.Now()
		s.push(snap, changes)
		s.metrics.pushes.Inc()
		s.metrics.pushTime.Observe(s.clock.Since(last).Seconds())
	}
}

// push translates a snapshot for the views in use and applies the result.
func (s *Server) push(snap clusterset.Snapshot, changes clusterset.Changes) {
	if changes.Clusters || !s.proxies.hasClusters() {
		s.proxies.setClusters(snap.Clusters())
	}
	// Each set update is applied as it comes: the proxies of the first
	// sets are answered while the translator builds the rest.
	err := s.tr.Translate(snap, changes, s.proxies.views(), func(u translate.SetUpdate) { s.cache.ApplyObserved(u, changes.Observed) })
	s.pushed.Store(&explainSnap{snap})
	if err != nil {
		s.log.Error("resources left out of a push", "revision", snap.Revision(), "err", err)
	}
	s.encodes.Store(s.tr.Encodes())
}
