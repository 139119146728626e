package mcp

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/imports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// istiodTypes are the 16 types istiod's xds:// config source subscribes.
var istiodTypes = []string{
	"core/v1alpha1/MeshConfig",
	"networking.istio.io/v1/ServiceEntry", "networking.istio.io/v1/WorkloadEntry", "networking.istio.io/v1/WorkloadGroup",
	"networking.istio.io/v1/DestinationRule", "networking.istio.io/v1/Gateway", "networking.istio.io/v1/Sidecar",
	"networking.istio.io/v1/VirtualService", "networking.istio.io/v1alpha3/EnvoyFilter", "networking.istio.io/v1beta1/ProxyConfig",
	"security.istio.io/v1/AuthorizationPolicy", "security.istio.io/v1/PeerAuthentication", "security.istio.io/v1/RequestAuthentication",
	"telemetry.istio.io/v1/Telemetry", "extensions.istio.io/v1alpha1/TrafficExtension", "extensions.istio.io/v1alpha1/WasmPlugin",
}

// fakeSource is a store of one set that the test replaces.
type fakeSource struct {
	mu      sync.Mutex
	set     *imports.Set
	changed chan struct{}
}

func (f *fakeSource) Current() (*imports.Set, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.set, f.changed
}

func (f *fakeSource) put(set *imports.Set) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = set
	close(f.changed)
	f.changed = make(chan struct{})
}

func echoImport(westAddr string) *federationpb.Import {
	port := []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}}
	return &federationpb.Import{
		Namespace: "demo", Name: "echo", Mcs: true, Ips: []string{"240.242.0.5"},
		Ports: []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, AppProtocol: "grpc"}},
		Sources: []*federationpb.ImportSource{
			{Cluster: "east", Network: "n1", Endpoints: []*federationpb.Endpoint{{Address: "10.1.0.1", Ready: true, Ports: port}}},
			{
				Cluster: "west", Network: "n1",
				Endpoints: []*federationpb.Endpoint{
					{Address: westAddr, Ready: true, Ports: port, Locality: &federationpb.Locality{Region: "r2", Zone: "z2"}, Workload: &federationpb.WorkloadRef{Uid: "w1"}},
					{Address: "10.2.0.99", Ports: port}, // not ready: left out
				},
				Workloads: []*federationpb.Workload{{Uid: "w1", ServiceAccount: "echo", App: "echo", MeshTls: true}},
			},
			{
				Cluster: "south", Network: "n2", ViaGateway: true,
				Endpoints: []*federationpb.Endpoint{{Address: "192.0.2.7", Ready: true, Network: "n2", Ports: []*federationpb.EndpointPort{{Name: "grpc", Port: 15443}}}},
			},
		},
	}
}

// istiodClient plays istiod's config source client: one SotW ADS stream,
// the 16 types at once, every request with a non-empty nonce.
type istiodClient struct {
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func dial(t *testing.T, addr string) *istiodClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "sidecar~10.1.0.100~istiod-0.istio-system~istio-system.svc.cluster.local"}
	for _, typ := range istiodTypes {
		if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typ, ResponseNonce: time.Now().String()}); err != nil {
			t.Fatal(err)
		}
	}
	return &istiodClient{stream: stream}
}

// recv reads responses until one of typ arrives, ACKing each.
func (c *istiodClient) recv(t *testing.T, typ string) *discovery.DiscoveryResponse {
	t.Helper()
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.stream.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if resp.GetTypeUrl() == typ {
			return resp
		}
	}
}

func decode(t *testing.T, resp *discovery.DiscoveryResponse) map[string]*networkingv1alpha3.ServiceEntry {
	t.Helper()
	out := map[string]*networkingv1alpha3.ServiceEntry{}
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != "type.googleapis.com/istio.mcp.v1alpha1.Resource" {
			t.Fatalf("resource of type %s: istiod drops what is not an MCP Resource", a.GetTypeUrl())
		}
		r := &mcpv1alpha1.Resource{}
		if err := a.UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		se := &networkingv1alpha3.ServiceEntry{}
		if err := r.GetBody().UnmarshalTo(se); err != nil {
			t.Fatal(err)
		}
		if r.GetMetadata().GetVersion() == "" {
			t.Errorf("%s has no version: istiod would never update it", r.GetMetadata().GetName())
		}
		out[r.GetMetadata().GetName()] = se
	}
	return out
}

// serve runs a server for east until the test ends.
func serve(t *testing.T, initialWait time.Duration) (*Server, *fakeSource) {
	t.Helper()
	src := &fakeSource{changed: make(chan struct{})}
	s, err := New(Config{Addr: "127.0.0.1:0", Entries: Entries{Cluster: "east", Domain: "cluster.local"}, InitialWait: initialWait}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s, src
}

func TestServesIstiod(t *testing.T) {
	s, src := serve(t, time.Hour)
	c := dial(t, s.Addr().String())

	// Every type but ServiceEntry is answered at once, empty, echoing the
	// type URL; ServiceEntries wait for the clusterset's imports.
	answered := map[string]bool{}
	for len(answered) < len(istiodTypes)-1 {
		resp, err := c.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetTypeUrl() == ServiceEntryType || !slices.Contains(istiodTypes, resp.GetTypeUrl()) || len(resp.GetResources()) != 0 {
			t.Fatalf("before any imports: %s with %d resources", resp.GetTypeUrl(), len(resp.GetResources()))
		}
		answered[resp.GetTypeUrl()] = true
		_ = c.stream.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
	}

	src.put(&imports.Set{Hub: "hub", Network: "n1", Imports: map[string]*federationpb.Import{"demo/echo": echoImport("10.2.0.1")}})
	resp := c.recv(t, ServiceEntryType)
	entries := decode(t, resp)
	local, cs := entries["demo/meshfed-echo"], entries["demo/meshfed-echo-clusterset"]
	if local == nil || cs == nil {
		t.Fatalf("entries %v, want demo/meshfed-echo and demo/meshfed-echo-clusterset", entries)
	}
	var addrs []string
	for _, e := range local.GetEndpoints() {
		addrs = append(addrs, e.GetAddress())
	}
	// East's own endpoint is istiod's already; west's not-ready one is out.
	if !slices.Equal(addrs, []string{"10.2.0.1", "192.0.2.7"}) || local.GetHosts()[0] != "echo.demo.svc.cluster.local" ||
		local.GetPorts()[0].GetName() != "grpc" || local.GetPorts()[0].GetProtocol() != "GRPC" {
		t.Errorf("the local entry: %v", local)
	}
	west, gw := local.GetEndpoints()[0], local.GetEndpoints()[1]
	if west.GetServiceAccount() != "echo" || west.GetLabels()["security.istio.io/tlsMode"] != "istio" || west.GetLocality() != "r2/z2" ||
		west.GetPorts()["grpc"] != 9090 || west.GetNetwork() != "n1" || west.GetLabels()["topology.istio.io/cluster"] != "west" {
		t.Errorf("west's endpoint: %v", west)
	}
	if gw.GetNetwork() != "n2" || gw.GetPorts()["grpc"] != 15443 || gw.GetLabels()["security.istio.io/tlsMode"] != "istio" {
		t.Errorf("south's gateway: %v", gw)
	}
	if cs.GetHosts()[0] != "echo.demo.svc.clusterset.local" || !slices.Equal(cs.GetAddresses(), []string{"240.242.0.5"}) || len(cs.GetEndpoints()) != 3 {
		t.Errorf("the clusterset entry: %v", cs)
	}

	// A change is a new version, the full state again.
	src.put(&imports.Set{Hub: "hub", Network: "n1", Imports: map[string]*federationpb.Import{"demo/echo": echoImport("10.2.0.2")}})
	next := c.recv(t, ServiceEntryType)
	if next.GetVersionInfo() == resp.GetVersionInfo() || len(next.GetResources()) != 2 {
		t.Errorf("after a change: version %q (was %q), %d resources", next.GetVersionInfo(), resp.GetVersionInfo(), len(next.GetResources()))
	}
	if got := decode(t, next)["demo/meshfed-echo"].GetEndpoints()[0].GetAddress(); got != "10.2.0.2" {
		t.Errorf("west's endpoint %s after the change", got)
	}

	// A rejected version is not sent again: the next response is the next
	// change.
	src.put(&imports.Set{Hub: "hub", Network: "n1", Imports: map[string]*federationpb.Import{"demo/echo": echoImport("10.2.0.3")}})
	rejected, err := c.stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.stream.Send(&discovery.DiscoveryRequest{
		TypeUrl: rejected.GetTypeUrl(), VersionInfo: next.GetVersionInfo(), ResponseNonce: rejected.GetNonce(),
		ErrorDetail: &status.Status{Message: "rejected"},
	}); err != nil {
		t.Fatal(err)
	}
	src.put(&imports.Set{Hub: "hub", Network: "n1", Imports: map[string]*federationpb.Import{"demo/echo": echoImport("10.2.0.4")}})
	if got := decode(t, c.recv(t, ServiceEntryType))["demo/meshfed-echo"].GetEndpoints()[0].GetAddress(); got != "10.2.0.4" {
		t.Errorf("after a NACK: west's endpoint %s, want the next change's 10.2.0.4", got)
	}
}

// TestInitialWait: with no hub, ServiceEntries are answered empty once the
// initial wait is over, so that istiod can become ready.
func TestInitialWait(t *testing.T) {
	s, _ := serve(t, 50*time.Millisecond)
	c := dial(t, s.Addr().String())
	if resp := c.recv(t, ServiceEntryType); len(resp.GetResources()) != 0 {
		t.Errorf("%d entries without a hub", len(resp.GetResources()))
	}
}

// TestDeltaIsRefused: a delta stream is told, in gRPC's terms, that the
// server speaks only the state of the world.
func TestDeltaIsRefused(t *testing.T) {
	s, _ := serve(t, time.Hour)
	conn, err := grpc.NewClient(s.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); grpcstatus.Code(err) != codes.Unimplemented {
		t.Errorf("a delta stream ended with %v, want Unimplemented", err)
	}
}
