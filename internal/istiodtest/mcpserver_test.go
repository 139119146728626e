package istiodtest

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"
)

// serviceEntryType is the type URL istiod's xds:// config source
// subscribes to ServiceEntries with: group/version/kind, not a proto type.
const serviceEntryType = "networking.istio.io/v1/ServiceEntry"

// mcpServer is a test double of an MCP-over-xDS server for istiod's
// xds:// config source: a go-control-plane ADS server over a ConfigWatcher
// of its own, which answers every type istiod subscribes to (empty but for
// what the test sets) and pushes a type's new state to every open watch
// of it. go-control-plane's caches cannot be used: they stamp every Any
// with the request's type URL, where istiod wants each resource to be an
// Any of istio.mcp.v1alpha1.Resource.
type mcpServer struct {
	// Addr is 127.0.0.1:port, for the config source xds://Addr.
	Addr string

	mu        sync.Mutex
	versions  map[string]int          // type URL → version of its state, from 1
	resources map[string][]*anypb.Any // type URL → its state; missing: empty
	watches   map[*mcpWatch]struct{}  // open watches
	requested map[string]struct{}     // type URLs istiod asked for
	responses int                     // responses sent, every stream
	wg        sync.WaitGroup          // the watches' goroutines
}

// mcpWatch is one open watch: a type's request on one stream, answered
// by a goroutine of its own with the type's state whenever its version
// differs from the one the watch last sent (or the request carried).
type mcpWatch struct {
	req  *discoveryv3.DiscoveryRequest
	out  chan cache.Response
	wake chan struct{} // buffered 1: the state may have changed
	done chan struct{} // closed by the cancel CreateWatch returned
}

var _ cache.Cache = (*mcpServer)(nil)

// startMCPServer serves on a free loopback port until the test ends.
func startMCPServer(t *testing.T) *mcpServer {
	t.Helper()
	s := &mcpServer{
		versions:  map[string]int{},
		resources: map[string][]*anypb.Any{},
		watches:   map[*mcpWatch]struct{}{},
		requested: map[string]struct{}{},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	callbacks := serverv3.CallbackFuncs{
		StreamResponseFunc: func(context.Context, int64, *discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {
			s.mu.Lock()
			s.responses++
			s.mu.Unlock()
		},
	}
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, s, callbacks))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(l)
	}()
	t.Cleanup(func() {
		cancel()
		g.Stop()
		<-served
		s.wg.Wait()
	})
	return s
}

// CreateWatch opens a watch that answers req at once when its version is
// not the type's, and again on every change, until it is cancelled.
func (s *mcpServer) CreateWatch(req *cache.Request, _ cache.Subscription, out chan cache.Response) (func(), error) {
	w := &mcpWatch{req: req, out: out, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.wake <- struct{}{}
	s.mu.Lock()
	s.watches[w] = struct{}{}
	s.requested[req.GetTypeUrl()] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.serve(w)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.watches, w)
			s.mu.Unlock()
			close(w.done)
		})
	}, nil
}

// serve sends w the type's state each time it is woken and the state's
// version is not the one w last sent. One goroutine per watch keeps its
// responses in order; the server's channel is shared by every type of the
// stream, and its buffer is smaller than the 16 types istiod asks for, so
// no response is sent while CreateWatch's caller waits.
func (s *mcpServer) serve(w *mcpWatch) {
	sent := w.req.GetVersionInfo()
	typeURL := w.req.GetTypeUrl()
	for {
		select {
		case <-w.done:
			return
		case <-w.wake:
		}
		s.mu.Lock()
		version := strconv.Itoa(s.version(typeURL))
		resources := slices.Clone(s.resources[typeURL])
		s.mu.Unlock()
		if version == sent {
			continue
		}
		resp := &cache.PassthroughResponse{
			Request: w.req,
			// A new message each time: the server writes its nonce
			// into it.
			DiscoveryResponse: &discoveryv3.DiscoveryResponse{VersionInfo: version, TypeUrl: typeURL, Resources: resources},
		}
		select {
		case w.out <- resp:
			sent = version
		case <-w.done:
			return
		}
	}
}

// version returns typeURL's version; s.mu is held.
func (s *mcpServer) version(typeURL string) int {
	if v := s.versions[typeURL]; v > 0 {
		return v
	}
	return 1
}

// CreateDeltaWatch refuses: istiod's xds:// client speaks state of the
// world only.
func (s *mcpServer) CreateDeltaWatch(*cache.DeltaRequest, cache.Subscription, chan cache.DeltaResponse) (func(), error) {
	return nil, errors.New("mcpServer: delta xDS is not served")
}

// Fetch refuses: there is no REST API.
func (s *mcpServer) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("mcpServer: fetch is not served")
}

// mcpResource wraps body as MCP's Resource, named namespace/name, with
// version as metadata.version: istiod applies a resource only when that
// changes (or is empty).
func mcpResource(t *testing.T, namespace, name, version string, body proto.Message) *anypb.Any {
	t.Helper()
	b, err := anypb.New(body)
	if err != nil {
		t.Fatal(err)
	}
	r, err := anypb.New(&mcpv1alpha1.Resource{
		Metadata: &mcpv1alpha1.Metadata{Name: namespace + "/" + name, Version: version, CreateTime: timestamppb.Now()},
		Body:     b,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Set replaces typeURL's state with resources and pushes it to every open
// watch of it. It returns when it changed.
func (s *mcpServer) Set(typeURL string, resources ...*anypb.Any) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions[typeURL] = s.version(typeURL) + 1
	s.resources[typeURL] = resources
	now := time.Now()
	for w := range s.watches {
		if w.req.GetTypeUrl() != typeURL {
			continue
		}
		select {
		case w.wake <- struct{}{}:
		default: // already woken
		}
	}
	return now
}

// Requested returns the type URLs istiod asked for, sorted.
func (s *mcpServer) Requested() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.requested))
	for typeURL := range s.requested {
		out = append(out, typeURL)
	}
	slices.Sort(out)
	return out
}

// Responses returns how many responses the server has sent.
func (s *mcpServer) Responses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.responses
}
