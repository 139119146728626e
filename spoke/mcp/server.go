package mcp

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/spoke/imports"
)

// ServiceEntryType is the type URL istiod subscribes ServiceEntries with.
const ServiceEntryType = "networking.istio.io/v1/ServiceEntry"

// Config configures the server.
type Config struct {
	// Addr is where istiod connects (its configSources' xds:// address).
	Addr string
	// Entries says for which cluster the entries are built.
	Entries Entries
	// InitialWait bounds how long ServiceEntries wait for the first set of
	// imports from a hub (see the package documentation).
	InitialWait time.Duration
}

// Source gives the imports to serve (imports.Store is one).
type Source interface {
	Current() (*imports.Set, <-chan struct{})
}

var _ Source = (*imports.Store)(nil)

// Server serves istiod over MCP-over-xDS.
type Server struct {
	cfg Config
	src Source
	log *slog.Logger
	lis net.Listener

	mu sync.Mutex
	// ready: ServiceEntries are answered (a set arrived, or the initial
	// wait is over).
	ready   bool
	entries []resource
	version string
	watches map[*watch]struct{}
}

type watch struct {
	req *cache.Request
	ch  chan cache.Response
}

// New returns a server listening on cfg.Addr.
func New(cfg Config, src Source, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("--mcp-addr: %w", err)
	}
	return &Server{cfg: cfg, src: src, log: log, lis: lis, watches: map[*watch]struct{}{}, version: versionOf(nil)}, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	g := grpc.NewServer(
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WaitForHandlers(true),
	)
	srv := gcpserver.NewServer(ctx, s, nil)
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(s.lis) }()
	s.log.Info("serving istiod the clusterset's services (MCP over xDS)", "addr", s.Addr().String())

	wait := time.NewTimer(s.cfg.InitialWait)
	defer wait.Stop()
	waiting := wait.C
	for {
		set, changed := s.src.Current()
		if set != nil || waiting == nil {
			s.update(set)
		}
		select {
		case <-ctx.Done():
			g.Stop()
			if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("mcp server: %w", err)
			}
			return nil
		case <-changed:
		case <-waiting:
			waiting = nil
			if set == nil {
				s.log.Warn("no hub has sent the clusterset's services yet; answering istiod's ServiceEntries with none, so that it can start",
					"waited", s.cfg.InitialWait)
			}
		}
	}
}

// update rebuilds the entries from a set and answers the watches that
// wait for a change.
func (s *Server) update(set *imports.Set) {
	entries := s.cfg.Entries.build(set)
	version := versionOf(entries)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready && version == s.version {
		return
	}
	s.ready, s.entries, s.version = true, entries, version
	for w := range s.watches {
		if w.req.GetTypeUrl() == ServiceEntryType && w.req.GetVersionInfo() != version {
			delete(s.watches, w)
			w.ch <- s.responseLocked(w.req)
		}
	}
}

// versionOf is a type's version: a hash of its resources' names and
// versions.
func versionOf(entries []resource) string {
	h := fnv.New64a()
	for _, r := range entries {
		_, _ = h.Write([]byte(r.name))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(r.version))
		_, _ = h.Write([]byte{0})
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// emptyVersion is the version of every type meshfed serves nothing of.
const emptyVersion = "empty"

// CreateWatch implements cache.ConfigWatcher: ServiceEntries are answered
// once ready and whenever they change; every other type at once, empty,
// and never again.
func (s *Server) CreateWatch(req *cache.Request, _ cache.Subscription, ch chan cache.Response) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.GetTypeUrl() != ServiceEntryType {
		if req.GetVersionInfo() != emptyVersion {
			ch <- s.responseLocked(req)
		}
		return func() {}, nil
	}
	if s.ready && req.GetVersionInfo() != s.version {
		ch <- s.responseLocked(req)
		return func() {}, nil
	}
	w := &watch{req: req, ch: ch}
	s.watches[w] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.watches, w)
	}, nil
}

// responseLocked is the full state of a request's type. The response
// echoes the type URL istiod asked with, and carries the resources as
// built (Anys of istio.mcp.v1alpha1.Resource): a passthrough response, so
// that nothing re-stamps them with the request's type. Callers hold s.mu.
func (s *Server) responseLocked(req *cache.Request) cache.Response {
	resp := &discovery.DiscoveryResponse{TypeUrl: req.GetTypeUrl(), VersionInfo: emptyVersion}
	if req.GetTypeUrl() == ServiceEntryType {
		resp.VersionInfo = s.version
		resp.Resources = make([]*anypb.Any, len(s.entries))
		for i, r := range s.entries {
			resp.Resources[i] = r.any
		}
	}
	return &cache.PassthroughResponse{Request: req, DiscoveryResponse: resp}
}

// CreateDeltaWatch implements cache.ConfigWatcher: istiod's config source
// speaks state of the world only.
func (s *Server) CreateDeltaWatch(*cache.DeltaRequest, cache.Subscription, chan cache.DeltaResponse) (func(), error) {
	return nil, errors.New("the MCP server serves state-of-the-world ADS only")
}

// Fetch implements cache.ConfigFetcher; REST polling is not served.
func (s *Server) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("xDS over REST is not served")
}

var _ cache.Cache = (*Server)(nil)
