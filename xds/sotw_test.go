package xds

import (
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/xds/translate"
	"github.com/meshfed/meshfed/xds/xdstest"
)

// sotwClient is a state-of-the-world ADS stream of go-control-plane's
// client types, driven by hand.
type sotwClient struct {
	t    *testing.T
	s    grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	resp chan *discovery.DiscoveryResponse
	errc chan error
}

func newSotwClient(t *testing.T, s *Server) *sotwClient {
	t.Helper()
	stream, err := adsClient(t, s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := &sotwClient{t: t, s: stream, resp: make(chan *discovery.DiscoveryResponse, 16), errc: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := stream.Recv()
			if err != nil {
				c.errc <- err
				return
			}
			c.resp <- r
		}
	}()
	t.Cleanup(func() { <-done }) // the test's context ends the stream
	return c
}

func (c *sotwClient) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	if err := c.s.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

// recv returns the next response, failing after a minute.
func (c *sotwClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	select {
	case r := <-c.resp:
		return r
	case err := <-c.errc:
		c.t.Fatalf("the stream ended: %v", err)
	case <-time.After(time.Minute):
		c.t.Fatal("no response in a minute")
	}
	return nil
}

// none fails if a response is waiting. Called after the server has
// answered a later request (or after a response that would come after
// it), it proves that none came for the earlier one.
func (c *sotwClient) none() {
	c.t.Helper()
	select {
	case r := <-c.resp:
		c.t.Fatalf("unexpected response: %v", r)
	default:
	}
}

func resourceNames(r *discovery.DiscoveryResponse) []string {
	var out []string
	for _, a := range r.GetResources() {
		out = append(out, string(a.GetValue())) // put encodes each resource as its name
	}
	slices.Sort(out)
	return out
}

// sotwServer serves an empty clusterset, whose translation leaves the
// test's own type alone.
func sotwServer(t *testing.T) *Server {
	t.Helper()
	c := xdstest.New()
	c.SetCluster(clusterset.ClusterInfo{ID: "east", Network: "n1"})
	s := serve(t, Config{}, c.Publish())
	<-s.Pushed()
	return s
}

// put applies resources to the shared set of typeURL, each encoded as its
// name followed by version.
func put(s *Server, typeURL string, version string, names ...string) {
	u := translate.SetUpdate{TypeURL: typeURL}
	for _, n := range names {
		u.Upserts = append(u.Upserts, translate.NewResource(typeURL, n, []byte(n+version)))
	}
	s.cache.Apply(u)
}

// TestSotwStreamWildcard: an empty first request of a type other than EDS
// and RDS subscribes to everything, and is answered at once; an ACK waits
// for a change; a request with a stale nonce is ignored; a change answers
// with what changed, and with the whole set for LDS and CDS.
func TestSotwStreamWildcard(t *testing.T) {
	s := sotwServer(t)
	const typ = "type.example/Thing"
	put(s, typ, "", "a", "b")
	c := newSotwClient(t, s)
	c.send(&discovery.DiscoveryRequest{Node: testNode("p1", ""), TypeUrl: typ})
	r := c.recv()
	if got := resourceNames(r); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first response %v, want a and b", got)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: typ, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
	// Stale: it answers no response the server sent. Were it read, the
	// stream would watch "b" alone and not be told of "a".
	c.send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{"b"}, ResponseNonce: "stale"})
	// A stream reads its requests in order: once a request of another
	// type is answered, the stale one has been read. CDS is whole in
	// every response.
	put(s, resourcev3.ClusterType, "", "x", "y")
	c.send(&discovery.DiscoveryRequest{TypeUrl: resourcev3.ClusterType})
	if got := resourceNames(c.recv()); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("CDS: %v", got)
	}
	// The book shows the subscription the stream holds: everything.
	if got, all := s.proxies.subscribed("p1", typ); !all {
		t.Errorf("the proxy book shows the stale request's %v, want the wildcard", got)
	}
	put(s, typ, "2", "a")
	r2 := c.recv()
	if r2.GetVersionInfo() == r.GetVersionInfo() || r2.GetNonce() == r.GetNonce() {
		t.Errorf("a change came with the version %q and nonce %q of the first response", r2.GetVersionInfo(), r2.GetNonce())
	}
	if got := resourceNames(r2); !slices.Equal(got, []string{"a2"}) {
		t.Errorf("after a change to a: %v, want a (the ignored request did not narrow the subscription)", got)
	}
}

// TestSotwStreamByName: EDS and RDS are subscribed by name, and responses
// carry only what the proxy lacks; a name dropped and asked again is sent
// again.
func TestSotwStreamByName(t *testing.T) {
	s := sotwServer(t)
	typ := resourcev3.RouteType
	put(s, typ, "", "a", "b", "c")
	c := newSotwClient(t, s)
	c.send(&discovery.DiscoveryRequest{Node: testNode("p1", ""), TypeUrl: typ})
	r := c.recv()
	if got := resourceNames(r); len(got) != 0 {
		t.Fatalf("an empty RDS request got %v, want nothing: RDS has no wildcard", got)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{"a"}, ResponseNonce: r.GetNonce()})
	r = c.recv()
	if got := resourceNames(r); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after subscribing a: %v", got)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{"a", "b"}, ResponseNonce: r.GetNonce()})
	r = c.recv()
	if got := resourceNames(r); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after subscribing b too: %v, want b alone (a is held)", got)
	}
	// Dropping a, then asking for it again: sent again, unchanged.
	c.send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{"b"}, ResponseNonce: r.GetNonce()})
	testwait.For(t, "the request for b alone", func() bool { names, _ := s.proxies.subscribed("p1", typ); return slices.Equal(names, []string{"b"}) })
	put(s, typ, "2", "b")
	r = c.recv()
	if got := resourceNames(r); !slices.Equal(got, []string{"b2"}) {
		t.Fatalf("after a change to b: %v", got)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{"a", "b"}, ResponseNonce: r.GetNonce()})
	if got := resourceNames(c.recv()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after asking for a again: %v, want a", got)
	}
	// A change to a name nobody here watches answers nothing.
	put(s, typ, "3", "c")
	c.send(&discovery.DiscoveryRequest{TypeUrl: resourcev3.ClusterType})
	c.recv() // CDS: ordered after any answer to the change to c
	c.none()
}

// TestSotwStreamRefusals: a request without a type URL, and a stream that
// asks for more types than a stream may watch, end the stream.
func TestSotwStreamRefusals(t *testing.T) {
	s := sotwServer(t)
	c := newSotwClient(t, s)
	c.send(&discovery.DiscoveryRequest{Node: testNode("p1", "")})
	if err := <-c.errc; status.Code(err) != codes.InvalidArgument {
		t.Errorf("no type URL: %v, want InvalidArgument", err)
	}
	c = newSotwClient(t, s)
	for i := range maxTypesPerStream + 1 {
		if err := c.s.Send(&discovery.DiscoveryRequest{Node: testNode("p2", ""), TypeUrl: "type.example/T" + string(rune('a'+i))}); err != nil {
			break // the server ended the stream
		}
	}
	if err := <-c.errc; status.Code(err) != codes.ResourceExhausted {
		t.Errorf("too many types: %v, want ResourceExhausted", err)
	}
}

// TestSotwDropsAnswersOfReplacedWatches: an answer a request overtook
// (its watch replaced) is not sent, nor taken as what the proxy holds;
// the new watch answers from what the proxy had.
func TestSotwDropsAnswersOfReplacedWatches(t *testing.T) {
	s, _ := newHandlers(t)
	update(t, s.cache, resourcev3.RouteType, map[string]proto.Message{"a": cluster("a", 1), "b": cluster("b", 1)})
	var sent []*adspb.DiscoveryResponse
	st := &sotwStream{h: s, send: func(m *adspb.DiscoveryResponse) error { sent = append(sent, m); return nil }, types: map[string]*sotwType{}, responses: make(chan *response, responsesPerStream)}
	if err := st.request(&adspb.DiscoveryRequest{Node: &adspb.Node{Id: "p"}, TypeUrl: resourcev3.RouteType, ResourceNames: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	overtaken := <-st.responses // a, for the first watch
	if err := st.request(&adspb.DiscoveryRequest{TypeUrl: resourcev3.RouteType, ResourceNames: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.respond(overtaken); err != nil || len(sent) != 0 {
		t.Fatalf("the overtaken answer was sent (%d messages, %v)", len(sent), err)
	}
	if len(st.types[resourcev3.RouteType].sub.returned) != 0 {
		t.Errorf("the overtaken answer's versions were kept: %v", st.types[resourcev3.RouteType].sub.returned)
	}
	if err := st.respond(<-st.responses); err != nil || len(sent) != 1 {
		t.Fatalf("the new watch's answer: %d messages sent, %v", len(sent), err)
	}
	if got := len(sent[0].GetResources()); got != 2 {
		t.Errorf("the new watch sent %d resources, want a and b: the proxy never got a", got)
	}
}

// TestSotwSubscriptionRepeated: an ACK repeats its subscription's names;
// it changes nothing and builds nothing, however many names it holds.
func TestSotwSubscriptionRepeated(t *testing.T) {
	names := []string{"a", "b", "c"}
	sub := newSotwSubscription(names, false)
	sub.returned["c"] = "1"
	if allocs := testing.AllocsPerRun(10, func() { sub.update(slices.Clone(names)[:3:3]) }); allocs > 1 {
		t.Errorf("a repeated request allocated %.0f times beyond its own names", allocs-1)
	}
	sub.update([]string{"a", "b"})
	if _, ok := sub.names["c"]; ok || sub.returned["c"] != "" {
		t.Errorf("after dropping c: names %v, returned %v", sub.names, sub.returned)
	}
}
