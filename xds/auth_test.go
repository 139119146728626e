package xds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/xds/xdstest"
)

// The hub's trust domain, and the clusterset the authentication tests
// serve: east names no trust domain (so it is in the hub's), west its
// own. other.example's CA is in the bundle the hub trusts, but no cluster
// of the clusterset is in that trust domain.
const (
	hubTD   = "cluster.local"
	westTD  = "west.example"
	otherTD = "other.example"
)

func authClusterset() clusterset.Snapshot {
	c := xdstest.New()
	c.SetCluster(clusterset.ClusterInfo{ID: "east", Network: "net-east"})
	c.SetCluster(clusterset.ClusterInfo{ID: "west", Network: "net-west", TrustDomain: westTD})
	c.SetService("east", echoWithPorts(8080))
	return c.Publish()
}

// testPKI is a CA per trust domain, a bundle of them all in dir/ca.crt,
// and a hub certificate from the first in dir/hub.crt and dir/hub.key.
type testPKI struct {
	dir string
	cas map[string]*pki.CA
	hub *pki.CA
}

func newTestPKI(t *testing.T, trustDomains ...string) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), cas: map[string]*pki.CA{}}
	var bundle []byte
	for _, td := range trustDomains {
		ca, err := pki.NewCA(td, time.Now(), 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		p.cas[td] = ca
		bundle = append(bundle, ca.CertPEM()...)
	}
	p.hub = p.cas[trustDomains[0]]
	certPEM, keyPEM, err := p.hub.Issue(federation.HubSPIFFEID(trustDomains[0]), []string{"localhost"},
		[]net.IP{net.IPv4(127, 0, 0, 1)}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.crt": bundle, "hub.crt": certPEM, "hub.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(p.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// serverTLS is the hub's xDS TLS configuration with --xds-tls-ca.
func (p *testPKI) serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	cfg, err := pki.ServerConfig(filepath.Join(p.dir, "hub.crt"), filepath.Join(p.dir, "hub.key"), filepath.Join(p.dir, "ca.crt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// dial connects to the server as a client presenting the certificate of
// SPIFFE ID id, or none for "".
func (p *testPKI) dial(t *testing.T, addr, id string) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.hub.CertPEM())
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "localhost"}
	if id != "" {
		u, err := url.Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := p.cas[u.Host].Issue(u, nil, nil, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return adsClient(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
}

func adsClient(t *testing.T, addr string, opts ...grpc.DialOption) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return discovery.NewAggregatedDiscoveryServiceClient(conn)
}

// serve runs a server over snap until the test ends.
func serve(t *testing.T, cfg Config, snap clusterset.Snapshot) *Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	s, err := New(cfg, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan clusterset.Snapshot, 1)
	first <- snap
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, first) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func testNode(id, cluster string) *core.Node {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if cluster != "" {
		md.Fields[MetadataClusterID] = structpb.NewStringValue(cluster)
	}
	return &core.Node{Id: id, Metadata: md}
}

// firstResponse opens a stream (delta or state of the world) that asks
// for every cluster (CDS), open until the test ends, and returns the
// number of resources of its first response, or the error that ended it.
func firstResponse(t *testing.T, c discovery.AggregatedDiscoveryServiceClient, node *core.Node, delta bool) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	if delta {
		s, err := c.DeltaAggregatedResources(ctx)
		if err != nil {
			return 0, err
		}
		if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		r, err := s.Recv()
		return len(r.GetResources()), err
	}
	s, err := c.StreamAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ClusterType}); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	r, err := s.Recv()
	return len(r.GetResources()), err
}

// TestXDSAuthenticatesProxies: with client certificates required, a proxy
// is served only with an identity of the clusterset's trust domains, and
// one that claims a cluster only with an identity of that cluster's; the
// served ones show their identity in /debug/proxies.
func TestXDSAuthenticatesProxies(t *testing.T) {
	p := newTestPKI(t, hubTD, westTD, otherTD)
	s := serve(t, Config{TrustDomain: hubTD, TLS: p.serverTLS(t)}, authClusterset())
	addr := s.Addr().String()

	tests := []struct {
		name     string
		identity string // "": no client certificate
		node     *core.Node
		delta    bool
		code     codes.Code
		message  []string // parts of the refusal's message
		reason   string
	}{
		{
			name: "no certificate", node: testNode("anonymous", ""), delta: true,
			code: codes.Unavailable, // the handshake fails: no stream at all
		},
		{
			name: "a trusted CA's certificate of another trust domain", identity: "spiffe://other.example/ns/demo/sa/client",
			node: testNode("foreign", ""), delta: true, code: codes.PermissionDenied, reason: refusedTrustDomain,
			message: []string{"spiffe://other.example/ns/demo/sa/client", `"other.example" is not one of the clusterset's trust domains (cluster.local, west.example)`},
		},
		{
			name: "a claimed cluster of another trust domain", identity: "spiffe://cluster.local/ns/demo/sa/client",
			node: testNode("claims-west", "west"), delta: true, code: codes.PermissionDenied, reason: refusedClusterTrustDomain,
			message: []string{"spiffe://cluster.local/ns/demo/sa/client", `cluster "west", whose trust domain is "west.example", not "cluster.local"`},
		},
		{
			name: "the same over state of the world", identity: "spiffe://cluster.local/ns/demo/sa/client",
			node: testNode("claims-west-sotw", "west"), code: codes.PermissionDenied, reason: refusedClusterTrustDomain,
			message: []string{`cluster "west", whose trust domain is "west.example"`},
		},
		{
			name: "a cluster the clusterset does not know is in the hub's trust domain", identity: "spiffe://west.example/ns/demo/sa/client",
			node: testNode("claims-north", "north"), delta: true, code: codes.PermissionDenied, reason: refusedClusterTrustDomain,
			message: []string{`cluster "north", whose trust domain is "cluster.local", not "west.example"`},
		},
		{name: "east in the hub's trust domain", identity: "spiffe://cluster.local/ns/demo/sa/east", node: testNode("east-1", "east"), delta: true},
		{name: "west in its own", identity: "spiffe://west.example/ns/demo/sa/west", node: testNode("west-1", "west")},
		{name: "no cluster claimed", identity: "spiffe://west.example/ns/demo/sa/any", node: testNode("any-1", ""), delta: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(s.metrics.refused.WithLabelValues(tc.reason))
			n, err := firstResponse(t, p.dial(t, addr, tc.identity), tc.node, tc.delta)
			if got := status.Code(err); got != tc.code {
				t.Fatalf("stream ended with %v, want code %v", err, tc.code)
			}
			if err != nil {
				t.Logf("refused: %v", err)
			}
			for _, m := range tc.message {
				if !strings.Contains(status.Convert(err).Message(), m) {
					t.Errorf("refusal %q does not say %q", status.Convert(err).Message(), m)
				}
			}
			if tc.reason != "" {
				if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues(tc.reason)) - before; got != 1 {
					t.Errorf("refusals counted as %s: %v, want 1", tc.reason, got)
				}
			}
			listed := debugProxies(t, s)
			if tc.code != codes.OK {
				if _, ok := listed[tc.node.GetId()]; ok {
					t.Errorf("/debug/proxies lists the refused %s", tc.node.GetId())
				}
				return
			}
			if n != 1 {
				t.Errorf("first response has %d clusters, want 1", n)
			}
			if got, ok := listed[tc.node.GetId()]; !ok || got != tc.identity {
				t.Errorf("/debug/proxies: %s listed %v with identity %q, want %q", tc.node.GetId(), ok, got, tc.identity)
			}
		})
	}
}

// debugProxies reads /debug/proxies: node → identity.
func debugProxies(t *testing.T, s *Server) map[string]string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ProxiesHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/proxies", nil))
	var body struct {
		Proxies []struct {
			ID       string `json:"id"`
			Identity string `json:"identity"`
		} `json:"proxies"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range body.Proxies {
		out[p.ID] = p.Identity
	}
	return out
}

// TestXDSAuthorizeHook: an Authorizer replaces the trust domain check; its
// refusals are the stream's, counted as denied.
func TestXDSAuthorizeHook(t *testing.T) {
	p := newTestPKI(t, hubTD)
	var asked []string
	s := serve(t, Config{
		TrustDomain: hubTD, TLS: p.serverTLS(t),
		Authorize: func(id *url.URL, proxy Proxy, _ []*clusterset.ClusterInfo) error {
			asked = append(asked, id.String()+" "+proxy.ID+" "+string(proxy.Cluster)) // under the book's lock
			if strings.HasPrefix(id.Path, "/ns/kube-system/") {
				return nil
			}
			return errors.New("only kube-system is served")
		},
	}, authClusterset())
	_, err := firstResponse(t, p.dial(t, s.Addr().String(), "spiffe://cluster.local/ns/demo/sa/client"), testNode("demo-1", "east"), true)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "only kube-system is served") {
		t.Errorf("demo's stream ended with %v, want PermissionDenied with the hook's reason", err)
	}
	if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues(refusedDenied)); got != 1 {
		t.Errorf("refusals counted as denied: %v, want 1", got)
	}
	if _, err := firstResponse(t, p.dial(t, s.Addr().String(), "spiffe://cluster.local/ns/kube-system/sa/ztunnel"), testNode("zt-1", "west"), true); err != nil {
		t.Errorf("kube-system's stream: %v", err)
	}
	s.proxies.mu.Lock()
	defer s.proxies.mu.Unlock()
	want := []string{"spiffe://cluster.local/ns/demo/sa/client demo-1 east", "spiffe://cluster.local/ns/kube-system/sa/ztunnel zt-1 west"}
	if strings.Join(asked, "|") != strings.Join(want, "|") {
		t.Errorf("the hook was asked %q, want %q", asked, want)
	}
}

// TestXDSServerOnlyTLSRecordsNoIdentity: without client certificates
// required, there is no identity to check, and no stream is refused for
// lack of one.
func TestXDSServerOnlyTLSRecordsNoIdentity(t *testing.T) {
	p := newTestPKI(t, hubTD)
	cfg := p.serverTLS(t)
	cfg.ClientAuth, cfg.GetConfigForClient = tls.NoClientCert, nil
	s := serve(t, Config{TrustDomain: hubTD, TLS: cfg}, authClusterset())
	if _, err := firstResponse(t, p.dial(t, s.Addr().String(), ""), testNode("west-1", "west"), true); err != nil {
		t.Fatal(err)
	}
	if ps := s.Proxies(); len(ps) != 1 || ps[0].Identity != "" {
		t.Errorf("/debug/proxies = %+v, want west-1 without an identity", ps)
	}
}

// TestXDSStreamRateLimit: one address opens streams up to the burst, then
// one per token the rate adds; the others are refused, and counted.
func TestXDSStreamRateLimit(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	s := serve(t, Config{StreamRate: 1, StreamBurst: 3, LimitLoopback: true, Clock: clk}, authClusterset())
	c := adsClient(t, s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	open := func(n int) (served, limited int) {
		for i := range n {
			_, err := firstResponse(t, c, testNode("p", "east"), i%2 == 0)
			switch status.Code(err) {
			case codes.OK:
				served++
			case codes.ResourceExhausted:
				limited++
			default:
				t.Fatalf("stream %d: %v", i, err)
			}
		}
		return served, limited
	}
	if served, limited := open(5); served != 3 || limited != 2 {
		t.Errorf("5 streams at once: %d served and %d refused, want 3 and 2", served, limited)
	}
	clk.Step(time.Second)
	if served, limited := open(2); served != 1 || limited != 1 {
		t.Errorf("2 streams a second later: %d served and %d refused, want 1 and 1", served, limited)
	}
	if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues(refusedRateLimited)); got != 3 {
		t.Errorf("refusals counted as rate_limited: %v, want 3", got)
	}
}

func TestStreamLimiter(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	addr := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	allowed := func(l *streamLimiter, a net.Addr, n int) int {
		got := 0
		for range n {
			if _, ok := l.allow(a); ok {
				got++
			}
		}
		return got
	}

	l := newStreamLimiter(1, 2, false, clk)
	if got := allowed(l, addr("127.0.0.1:1"), 1000); got != 1000 {
		t.Errorf("loopback: %d of 1000 allowed, want all (exempt)", got)
	}
	if got := allowed(l, addr("[::1]:1"), 1000); got != 1000 {
		t.Errorf("IPv6 loopback: %d of 1000 allowed, want all (exempt)", got)
	}
	if got := allowed(l, addr("10.0.0.1:1"), 5); got != 2 {
		t.Errorf("10.0.0.1: %d of 5 allowed, want the burst of 2", got)
	}
	if got := allowed(l, addr("[::ffff:10.0.0.1]:2"), 1); got != 0 {
		t.Errorf("10.0.0.1 as an IPv4-mapped address: %d allowed, want none (the same bucket)", got)
	}
	if got := allowed(l, addr("10.0.0.2:1"), 5); got != 2 {
		t.Errorf("10.0.0.2: %d of 5 allowed, want its own burst of 2", got)
	}
	clk.Step(time.Second)
	if got := allowed(l, addr("10.0.0.1:1"), 5); got != 1 {
		t.Errorf("10.0.0.1 a second later: %d of 5 allowed, want 1", got)
	}
	if _, ok := l.allow(fakeAddr("bufconn")); !ok {
		t.Error("an address that is no IP address was limited")
	}

	// The buckets are bounded: the least recently seen address is
	// forgotten, and starts again with a full bucket.
	for i := range maxLimitedAddrs {
		l.allow(&net.TCPAddr{IP: net.IPv4(10, 1, byte(i>>8), byte(i))})
	}
	if n := l.buckets.Len(); n != maxLimitedAddrs {
		t.Errorf("%d buckets, want at most %d", n, maxLimitedAddrs)
	}
	if got := allowed(l, addr("10.0.0.1:1"), 5); got != 2 {
		t.Errorf("10.0.0.1 once forgotten: %d of 5 allowed, want a full burst of 2", got)
	}

	if newStreamLimiter(-1, 0, false, clk) != nil {
		t.Error("a negative rate does not disable the limit")
	}
	if got := allowed(newStreamLimiter(0, 2, true, clk), addr("127.0.0.1:1"), 5); got != 2 {
		t.Errorf("loopback with LimitLoopback: %d of 5 allowed, want the burst of 2", got)
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return string(a) }
func (a fakeAddr) String() string  { return string(a) }

func TestTrustDomainAuthorizer(t *testing.T) {
	clusters := []*clusterset.ClusterInfo{{ID: "east"}, {ID: "west", TrustDomain: westTD}}
	authorize := TrustDomainAuthorizer(hubTD)
	for _, tc := range []struct {
		id      string
		cluster federation.ClusterID
		want    error
	}{
		{id: "spiffe://cluster.local/ns/a/sa/b"},
		{id: "spiffe://cluster.local/ns/a/sa/b", cluster: "east"},
		{id: "spiffe://cluster.local/ns/a/sa/b", cluster: "unknown"},
		{id: "spiffe://west.example/ns/a/sa/b"},
		{id: "spiffe://west.example/ns/a/sa/b", cluster: "west"},
		{id: "spiffe://west.example/ns/a/sa/b", cluster: "east", want: ErrClusterTrustDomain},
		{id: "spiffe://west.example/ns/a/sa/b", cluster: "unknown", want: ErrClusterTrustDomain},
		{id: "spiffe://cluster.local/ns/a/sa/b", cluster: "west", want: ErrClusterTrustDomain},
		{id: "spiffe://other.example/ns/a/sa/b", want: ErrForeignTrustDomain},
		{id: "spiffe://other.example/ns/a/sa/b", cluster: "west", want: ErrForeignTrustDomain},
	} {
		u, err := url.Parse(tc.id)
		if err != nil {
			t.Fatal(err)
		}
		err = authorize(u, Proxy{ID: "p", Cluster: tc.cluster}, clusters)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s claiming cluster %q: %v, want %v", tc.id, tc.cluster, err, tc.want)
		}
	}
}

// TestWorkloadAPIOffByDefault: a hub that does not serve the workload API
// refuses a stream that asks for either of its types, saying where a
// ztunnel should go, and counts it; with the workload API on, the same
// stream is served.
func TestWorkloadAPIOffByDefault(t *testing.T) {
	ask := func(s *Server, typeURL string) error {
		c := adsClient(t, s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stream, err := c.DeltaAggregatedResources(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: testNode("ztunnel-1", "east"), TypeUrl: typeURL}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	off := serve(t, Config{}, authClusterset())
	for _, typeURL := range []string{AddressType, AuthorizationType} {
		err := ask(off, typeURL)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "istiod") || !strings.Contains(err.Error(), "--xds-workload-api") {
			t.Errorf("%s: %v, want FailedPrecondition naming istiod and --xds-workload-api", typeURL, err)
		}
	}
	if got := testutil.ToFloat64(off.metrics.refused.WithLabelValues(refusedWorkloadAPI)); got != 2 {
		t.Errorf("refusals counted as workload_api: %v, want 2", got)
	}
	if _, err := firstResponse(t, adsClient(t, off.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())), testNode("envoy-1", "east"), true); err != nil {
		t.Errorf("an Envoy stream to the same hub: %v", err)
	}
	on := serve(t, Config{WorkloadAPI: true}, authClusterset())
	if err := ask(on, AddressType); err != nil {
		t.Errorf("with the workload API on: %v", err)
	}
}
