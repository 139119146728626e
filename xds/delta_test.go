package xds

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/grpccodec"
	"github.com/meshfed/meshfed/internal/testwait"
)

func TestSubscription(t *testing.T) {
	for _, tc := range []struct {
		name         string
		legacy       bool
		requests     [][2][]string // subscribe, unsubscribe
		wantWildcard bool
		wantNames    []string
	}{
		{name: "an empty first request is wildcard where the type allows it", legacy: true, requests: [][2][]string{{nil, nil}}, wantWildcard: true},
		{name: "and subscribes nothing where it does not", requests: [][2][]string{{nil, nil}}},
		{name: "names end the legacy rule but keep the wildcard", legacy: true, requests: [][2][]string{{nil, nil}, {{"a"}, nil}}, wantWildcard: true, wantNames: []string{"a"}},
		{name: "naming resources first is not wildcard", legacy: true, requests: [][2][]string{{{"a", "b"}, nil}}, wantNames: []string{"a", "b"}},
		{name: "an explicit wildcard", requests: [][2][]string{{{"*"}, nil}}, wantWildcard: true},
		{name: "unsubscribing the wildcard", legacy: true, requests: [][2][]string{{nil, nil}, {{"a"}, nil}, {nil, {"*"}}}, wantNames: []string{"a"}},
		{name: "unsubscribing a name", requests: [][2][]string{{{"a", "b"}, nil}, {nil, {"a"}}}, wantNames: []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubscription(tc.requests[0][0], tc.requests[0][1], nil, tc.legacy)
			for _, r := range tc.requests[1:] {
				s.update(r[0], r[1])
			}
			if s.wildcard != tc.wantWildcard || !slices.Equal(slices.Sorted(maps.Keys(s.names)), tc.wantNames) {
				t.Errorf("wildcard %v names %v, want %v %v", s.wildcard, slices.Sorted(maps.Keys(s.names)), tc.wantWildcard, tc.wantNames)
			}
		})
	}

	// A name unsubscribed from a wildcard subscription is still wanted:
	// its version is cleared so that the proxy is told whether it exists;
	// a name unsubscribed otherwise is forgotten.
	s := newSubscription([]string{"*", "a"}, nil, map[string]string{"a": "v1", "b": "v1"}, false)
	s.update(nil, []string{"a"})
	if v, ok := s.versions["a"]; !ok || v != "" {
		t.Errorf("a's version after unsubscribing it from a wildcard: %q, %v; want \"\", true", v, ok)
	}
	s = newSubscription([]string{"a", "b"}, nil, map[string]string{"a": "v1", "b": "v1"}, false)
	s.update(nil, []string{"a"})
	if _, ok := s.versions["a"]; ok {
		t.Error("a name unsubscribed by name keeps its version")
	}
}

// fakeDeltaStream is a delta ADS stream driven by the test.
type fakeDeltaStream struct {
	grpc.ServerStream
	ctx  context.Context
	reqs chan *adspb.DeltaDiscoveryRequest
	resp chan *adspb.DeltaDiscoveryResponse
}

func (f *fakeDeltaStream) Context() context.Context { return f.ctx }
func (f *fakeDeltaStream) Send(r *adspb.DeltaDiscoveryResponse) error {
	f.resp <- r
	return nil
}

// SendMsg takes what the handler sends, a response or its encoding
// (decoded as a client would).
func (f *fakeDeltaStream) SendMsg(m any) error {
	switch m := m.(type) {
	case *adspb.DeltaDiscoveryResponse:
		return f.Send(m)
	case grpccodec.Encoded:
		r := &adspb.DeltaDiscoveryResponse{}
		if err := proto.Unmarshal(append(slices.Clip(m.Body), m.Tail...), r); err != nil {
			return err
		}
		return f.Send(r)
	}
	return fmt.Errorf("cannot send %T", m)
}

func (f *fakeDeltaStream) Recv() (*adspb.DeltaDiscoveryRequest, error) {
	select {
	case r := <-f.reqs:
		return r, nil
	case <-f.ctx.Done():
		return nil, io.EOF
	}
}

func (f *fakeDeltaStream) recv(t *testing.T) *adspb.DeltaDiscoveryResponse {
	t.Helper()
	select {
	case r := <-f.resp:
		return r
	case <-time.After(time.Minute):
		t.Fatal("no response")
		return nil
	}
}

// newHandlers returns a state-of-the-world and a delta handler over one
// empty cache and proxy book, serving (the workload API too).
func newHandlers(t *testing.T) (*sotwHandler, *deltaHandler) {
	t.Helper()
	m := newMetrics(prometheus.NewRegistry(), func() int64 { return 0 })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := newProxies(m, log, &streamAuth{refusals: newRefusals(m.refused, log, clock.RealClock{}), workloadAPI: true}, nil)
	ready := make(chan struct{})
	close(ready)
	c := NewCache()
	return &sotwHandler{streamHandler{cache: c, proxies: p, ready: ready, stopping: t.Context().Done()}},
		&deltaHandler{streamHandler{cache: c, proxies: p, ready: ready, stopping: t.Context().Done()}}
}

// newDeltaHandler returns a delta handler over an empty cache, serving.
func newDeltaHandler(t *testing.T) *deltaHandler {
	t.Helper()
	_, h := newHandlers(t)
	return h
}

// open serves a stream until the test ends or end is called; done has
// serve's result.
func (h *deltaHandler) open(t *testing.T) (st *fakeDeltaStream, end func(), done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	st = &fakeDeltaStream{ctx: ctx, reqs: make(chan *adspb.DeltaDiscoveryRequest), resp: make(chan *adspb.DeltaDiscoveryResponse, 1)}
	errc := make(chan error, 1)
	go func() { errc <- h.serve(st) }()
	t.Cleanup(cancel)
	return st, cancel, errc
}

// TestDeltaStream drives a ztunnel-like wildcard stream: its first request
// is answered, an ACK of the current state is not, a change is sent once,
// and a closed stream leaves nothing behind in the proxy book or the cache.
func TestDeltaStream(t *testing.T) {
	h := newDeltaHandler(t)
	update(t, h.cache, AddressType, map[string]proto.Message{"a": cluster("a", 1)})
	st, end, done := h.open(t)
	st.reqs <- &adspb.DeltaDiscoveryRequest{Node: &adspb.Node{Id: "ztunnel-1"}, TypeUrl: AddressType}
	if r := st.recv(t); len(r.GetResources()) != 1 || r.GetNonce() == "" {
		t.Fatalf("first response %v, want a", r)
	}
	st.reqs <- &adspb.DeltaDiscoveryRequest{TypeUrl: AddressType, ResponseNonce: "1"}
	update(t, h.cache, AddressType, map[string]proto.Message{"b": cluster("b", 1)})
	r := st.recv(t)
	if got := names(r.GetResources()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after adding b: %v, want b alone", got)
	}
	st.reqs <- &adspb.DeltaDiscoveryRequest{TypeUrl: AddressType, ResponseNonce: r.GetNonce()}
	count := func() (streams, watches int) {
		h.proxies.mu.Lock()
		streams = len(h.proxies.streams)
		h.proxies.mu.Unlock()
		h.cache.mu.Lock()
		defer h.cache.mu.Unlock()
		if ws := h.cache.delta[setKey{AddressType, ""}]; ws != nil {
			watches = len(ws.wildcard) + len(ws.names)
		}
		return streams, watches
	}
	testwait.For(t, "the ACK's watch", func() bool { s, w := count(); return s == 1 && w == 1 })

	end() // the proxy goes away
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if streams, watches := count(); streams != 0 || watches != 0 {
		t.Errorf("after the stream ended: %d streams in the book and %d watches in the cache, want none", streams, watches)
	}
}

// TestDeltaStreamBoundsTypes: a proxy cannot open watches for an unbounded
// number of type URLs.
func TestDeltaStreamBoundsTypes(t *testing.T) {
	h := newDeltaHandler(t)
	st, _, done := h.open(t)
	node := &adspb.Node{Id: "greedy"}
	for i := range maxTypesPerStream + 1 {
		select {
		case st.reqs <- &adspb.DeltaDiscoveryRequest{Node: node, TypeUrl: fmt.Sprintf("type.example/t%d", i)}:
		case err := <-done:
			if status.Code(err) != codes.ResourceExhausted || i != maxTypesPerStream {
				t.Fatalf("stream ended after %d types with %v, want ResourceExhausted after %d", i, err, maxTypesPerStream)
			}
			return
		}
	}
	if err := <-done; status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream ended with %v, want ResourceExhausted", err)
	}
}

// TestDeltaStreamBookCountsSubscriptions: the proxy book counts a delta
// stream's subscribed names, not those of its last request (an ACK names
// none).
func TestDeltaStreamBookCountsSubscriptions(t *testing.T) {
	h := newDeltaHandler(t)
	update(t, h.cache, resourcev3.ClusterType, map[string]proto.Message{"a": cluster("a", 1), "b": cluster("b", 1)})
	st, _, _ := h.open(t)
	st.reqs <- &adspb.DeltaDiscoveryRequest{Node: &adspb.Node{Id: "envoy-1"}, TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"a", "b"}}
	r := st.recv(t)
	st.reqs <- &adspb.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResponseNonce: r.GetNonce()}
	subscribed := func() int {
		h.proxies.mu.Lock()
		defer h.proxies.mu.Unlock()
		for _, ps := range h.proxies.streams {
			if ts := ps.Types[resourcev3.ClusterType]; ts != nil && !ts.LastAck.IsZero() {
				return ts.Subscribed
			}
		}
		return -1
	}
	testwait.For(t, "the ACK in the book", func() bool { return subscribed() != -1 })
	if got := subscribed(); got != 2 {
		t.Errorf("the book counts %d subscribed names after the ACK, want 2", got)
	}
}

// TestNackLogged: a proxy's NACK is logged as a warning naming the proxy,
// its cluster, the type and nonce it rejected, and the proxy's reason.
func TestNackLogged(t *testing.T) {
	var logs bytes.Buffer
	m := newMetrics(prometheus.NewRegistry(), func() int64 { return 0 })
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p := newProxies(m, log, &streamAuth{refusals: newRefusals(m.refused, log, clock.RealClock{})}, nil)
	id := streamID{delta: true, id: 1}
	node := &adspb.Node{Id: "envoy-1", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataClusterID: structpb.NewStringValue("east"), MetadataNetwork: structpb.NewStringValue("n1"),
	}}}
	if _, err := p.request(id, node, resourcev3.ClusterType, requestState{wildcard: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.request(id, node, resourcev3.ClusterType, requestState{wildcard: true, nonce: "7", nack: &adspb.Status{Code: 3, Message: "cluster rejected"}}); err != nil {
		t.Fatal(err)
	}
	want := `level=WARN msg="proxy rejected a response" proxy=envoy-1 cluster=east type=` + resourcev3.ClusterType + ` nonce=7 reason="cluster rejected"`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks\n%s\nin\n%s", want, logs.String())
	}
}

// TestNackSeriesFromTheStart: every type served has its NACK series from
// the start, at 0, so that an alert on increase() sees its first NACK.
func TestNackSeriesFromTheStart(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), func() int64 { return 0 })
	if n := testutil.CollectAndCount(m.nacks, "meshfed_xds_nacks_total"); n != 6 {
		t.Errorf("%d series of meshfed_xds_nacks_total, want one per type served (CDS, EDS, LDS, RDS, Address, Authorization)", n)
	}
}

// TestDeltaDropsAnswersOfReplacedWatches: an answer by name that a
// request overtook (its watch replaced) is neither sent nor taken as what
// the proxy holds; the new watch answers from what the proxy had.
func TestDeltaDropsAnswersOfReplacedWatches(t *testing.T) {
	h := newDeltaHandler(t)
	update(t, h.cache, resourcev3.ClusterType, map[string]proto.Message{"a": cluster("a", 1), "b": cluster("b", 1)})
	var sent []any
	st := &deltaStream{h: h, send: func(m any) error { sent = append(sent, m); return nil }, types: map[string]*deltaType{}, responses: make(chan *deltaResp, responsesPerStream)}
	if err := st.request(&adspb.DeltaDiscoveryRequest{Node: &adspb.Node{Id: "p"}, TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	overtaken := <-st.responses // a, for the first watch
	if err := st.request(&adspb.DeltaDiscoveryRequest{TypeUrl: resourcev3.ClusterType, ResourceNamesSubscribe: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.respond(overtaken); err != nil || len(sent) != 0 {
		t.Fatalf("the overtaken answer was sent (%d messages, %v)", len(sent), err)
	}
	if len(st.types[resourcev3.ClusterType].sub.versions) != 0 {
		t.Errorf("the overtaken answer's versions were kept: %v", st.types[resourcev3.ClusterType].sub.versions)
	}
	r := <-st.responses
	if err := st.respond(r); err != nil || len(sent) != 1 {
		t.Fatalf("the new watch's answer: %d messages sent, %v", len(sent), err)
	}
	if got := names(sent[0].(*adspb.DeltaDiscoveryResponse).GetResources()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("the new watch sent %v, want a and b: the proxy never got a", got)
	}
}

// TestBookShowsTheStreamsWildcard: the proxy book reads a type's
// subscription from the stream, so that /debug/proxies says what the
// stream serves: a ztunnel's empty Address request and Envoy's empty LDS
// request subscribe to everything, an empty EDS request to nothing, and a
// delta stream's names are those it subscribed, by either kind.
func TestBookShowsTheStreamsWildcard(t *testing.T) {
	sotw, delta := newHandlers(t)
	node := &adspb.Node{Id: "p"}
	ds := &deltaStream{h: delta, id: streamID{delta: true, id: 1}, send: func(any) error { return nil }, types: map[string]*deltaType{}, responses: make(chan *deltaResp, responsesPerStream)}
	ss := &sotwStream{h: sotw, id: streamID{id: 2}, send: func(*adspb.DiscoveryResponse) error { return nil }, types: map[string]*sotwType{}, responses: make(chan *response, responsesPerStream)}
	t.Cleanup(func() { ds.cancel(); ss.cancel() })
	for _, err := range []error{
		ds.request(&adspb.DeltaDiscoveryRequest{Node: node, TypeUrl: AddressType}),
		ds.request(&adspb.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"a", "b"}}),
		ds.request(&adspb.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesUnsubscribe: []string{"a"}}),
		ss.request(&adspb.DiscoveryRequest{Node: &adspb.Node{Id: "q"}, TypeUrl: resourcev3.ListenerType}),
		ss.request(&adspb.DiscoveryRequest{TypeUrl: resourcev3.EndpointType}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	book := delta.proxies
	book.mu.Lock()
	defer book.mu.Unlock()
	for _, tc := range []struct {
		stream   streamID
		typeURL  string
		wildcard bool
		names    []string
	}{
		{ds.id, AddressType, true, nil},
		{ds.id, resourcev3.EndpointType, false, []string{"b"}},
		{ss.id, resourcev3.ListenerType, true, nil},
		{ss.id, resourcev3.EndpointType, false, []string{}},
	} {
		ts := book.streams[tc.stream].Types[tc.typeURL]
		if ts.Wildcard != tc.wildcard || (ts.names == nil) != tc.wildcard || !slices.Equal(slices.Sorted(maps.Keys(ts.names)), tc.names) || ts.Subscribed != len(tc.names) {
			t.Errorf("%s of stream %v: wildcard %v, names %v (%d); want %v, %v", typeLabel(tc.typeURL), tc.stream, ts.Wildcard, slices.Sorted(maps.Keys(ts.names)), ts.Subscribed, tc.wildcard, tc.names)
		}
	}
}
