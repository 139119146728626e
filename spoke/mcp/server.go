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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/recvloop"
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

// Server serves istiod over MCP-over-xDS. It implements the one
// state-of-the-world ADS stream istiod opens itself, over the ADS messages
// of package adspb, rather than with go-control-plane's server and types,
// which would link every xDS service and Envoy's config API into the spoke
// for one type that is not Envoy's.
type Server struct {
	cfg Config
	src Source
	log *slog.Logger
	lis net.Listener

	mu sync.Mutex
	// ready: ServiceEntries are answered (a set arrived, or the initial
	// wait is over).
	ready   bool
	entries []*anypb.Any
	version string
	// changed is closed, and replaced, when the entries change.
	changed chan struct{}
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
	return &Server{cfg: cfg, src: src, log: log, lis: lis, version: versionOf(nil), changed: make(chan struct{})}, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	g := grpc.NewServer(
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WaitForHandlers(true),
	)
	adspb.RegisterADSServer(g, s)
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

// update rebuilds the entries from a set and wakes the streams.
func (s *Server) update(set *imports.Set) {
	entries := s.cfg.Entries.build(set)
	version := versionOf(entries)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready && version == s.version {
		return
	}
	s.ready, s.version = true, version
	s.entries = make([]*anypb.Any, len(entries))
	for i, r := range entries {
		s.entries[i] = r.any
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// state is what a stream answers with now: the ServiceEntries' version
// ("" while not ready) and the channel closed on their next change.
func (s *Server) state() (string, []*anypb.Any, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		return "", nil, s.changed
	}
	return s.version, s.entries, s.changed
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

// subscription is a stream's state of one type: the nonce and version it
// was last sent (or, before that, the version it said it had).
type subscription struct {
	nonce   string
	version string
}

// StreamAggregatedResources serves one istiod: ServiceEntries once ready
// and whenever they change; every other type at once, empty, and never
// again. Each response is the full state of its type, echoes the type URL
// istiod asked with, and carries the resources as built (Anys of
// istio.mcp.v1alpha1.Resource).
func (s *Server) StreamAggregatedResources(stream adspb.StreamServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	reqs := recvloop.Start(ctx, stream.Recv)

	subs := map[string]*subscription{}
	nonces := 0
	for {
		version, entries, changed := s.state()
		for typ, sub := range subs {
			resp := &adspb.DiscoveryResponse{TypeUrl: typ, VersionInfo: emptyVersion}
			if typ == ServiceEntryType {
				if version == "" {
					continue
				}
				resp.VersionInfo, resp.Resources = version, entries
			}
			if sub.version == resp.GetVersionInfo() {
				continue
			}
			nonces++
			resp.Nonce = strconv.Itoa(nonces)
			if err := stream.Send(resp); err != nil {
				return err
			}
			sub.nonce, sub.version = resp.GetNonce(), resp.GetVersionInfo()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-reqs.Done():
			if err := reqs.Err(); !recvloop.Closed(err) {
				return err
			}
			return nil
		case req := <-reqs.Msgs():
			typ := req.GetTypeUrl()
			sub, ok := subs[typ]
			switch {
			case typ == "":
				return status.Error(codes.InvalidArgument, "a request without a type URL (only ADS with one type per request is served)")
			case !ok:
				// istiod's first requests carry a nonce of their own; only
				// the version it has matters.
				subs[typ] = &subscription{version: req.GetVersionInfo()}
			case req.GetResponseNonce() != sub.nonce:
				// Answers a response superseded since: the next request
				// answers the newer one.
			case req.GetErrorDetail() != nil:
				s.log.Warn("istiod rejected the clusterset's services", "type", typ, "version", sub.version,
					"node", req.GetNode().GetId(), "error", req.GetErrorDetail().GetMessage())
			}
		}
	}
}

// DeltaAggregatedResources is not served: istiod asks its config sources
// for the state of the world.
func (s *Server) DeltaAggregatedResources(adspb.DeltaStreamServer) error {
	return status.Error(codes.Unimplemented, "delta xDS is not served: MCP is state of the world")
}
