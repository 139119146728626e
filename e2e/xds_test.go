//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/istiodtest"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/shard"
)

// xdsFleet is a hub serving xDS, with spokes fed directly through trackers.
type xdsFleet struct {
	hub      *hub.Hub
	trackers map[string]tracker
}

func startXDSFleet(t *testing.T) *xdsFleet {
	t.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.XDSWorkloadAPI = true // the ztunnel tests connect to the hub itself
	h, err := hub.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, h.Run)
	return &xdsFleet{hub: h, trackers: map[string]tracker{}}
}

// cluster publishes a cluster's echo endpoints through a real uplink.
func (f *xdsFleet) cluster(t *testing.T, id, network, zone string, gateways []*federationpb.Gateway, backends ...backend) {
	t.Helper()
	tr := newTracker()
	f.trackers[id] = tr
	f.setEndpoints(id, network, zone, gateways, backends...)
	client := federationClient(t, f.hub.FederationAddr().String())
	runUplink(t, id, tr, (&killableDialer{client: client}).dial)
}

func (f *xdsFleet) setEndpoints(id, network, zone string, gateways []*federationpb.Gateway, backends ...backend) {
	eps := make([]*federationpb.Endpoint, 0, len(backends))
	for _, b := range backends {
		eps = append(eps, echoEndpoint(b, "r-"+id, zone))
	}
	f.setShard(id, network, gateways, eps)
}

// echoEndpoint is a ready endpoint of demo/echo served by b.
func echoEndpoint(b backend, region, zone string) *federationpb.Endpoint {
	return &federationpb.Endpoint{
		Namespace: "demo", Service: "echo", Address: b.addr, Ready: true, Serving: true,
		Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: b.port}},
		Locality: &federationpb.Locality{Region: region, Zone: zone},
	}
}

// setShard replaces a cluster's shard: its network, gateways and echo's
// endpoints as given.
func (f *xdsFleet) setShard(id, network string, gateways []*federationpb.Gateway, eps []*federationpb.Endpoint) {
	f.trackers[id].Update(time.Now(), true, func(w shard.Writer) {
		w.SetCluster(&federationpb.Cluster{Id: id, Network: network, Gateways: gateways})
		must(w.PutService(testService("demo", "echo")))
		must(w.SetEndpoints("demo/echo", eps))
	})
}

func TestXDSGRPCClientFailsOverAcrossClusters(t *testing.T) {
	f := startXDSFleet(t)
	east := []backend{startBackend(t, "127.0.0.31", "east"), startBackend(t, "127.0.0.32", "east")}
	west := []backend{startBackend(t, "127.0.0.41", "west")}
	f.cluster(t, "east", "net1", "z-east", nil, east...)
	f.cluster(t, "west", "net1", "z-west", nil, west...)

	// A client in east's zone prefers east: west is a lower priority.
	c := xdsClient(t, f.hub.XDSAddr().String(), "client-east", "east", "net1", "r-east", "z-east")
	eventually(t, c, "east")

	// East's endpoints go: traffic fails over to west.
	f.setEndpoints("east", "net1", "z-east", nil)
	eventually(t, c, "west")

	// They come back: traffic returns.
	f.setEndpoints("east", "net1", "z-east", nil, east...)
	eventually(t, c, "east")

	proxies := f.hub.XDS().Proxies()
	if len(proxies) != 1 || proxies[0].Cluster != "east" || proxies[0].Network != "net1" || len(proxies[0].Types) != 4 {
		t.Errorf("/debug/proxies = %+v, want the one client with its cluster, network and four types", proxies)
	}
}

// A client that dials an MCS import's ClusterSetIP reaches the import's
// endpoints in every cluster, as one that dials its clusterset hostname.
func TestXDSGRPCClientDialsClustersetIP(t *testing.T) {
	f := startXDSFleet(t)
	f.cluster(t, "east", "net1", "z-east", nil, startBackend(t, "127.0.0.34", "east"))
	f.cluster(t, "west", "net1", "z-west", nil, startBackend(t, "127.0.0.44", "west"))
	s := await(t, f.hub.Registry(), "echo with a ClusterSetIP in both clusters", func(s clusterset.Snapshot) bool {
		v, ok := s.Service("demo/echo")
		return ok && len(v.Clusters) == 2 && len(s.Import("demo/echo").ClustersetIPs) == 1
	})
	vip := s.Import("demo/echo").ClustersetIPs[0]
	if !netip.MustParsePrefix("240.242.0.0/16").Contains(vip) {
		t.Fatalf("ClusterSetIP %s outside the default pool", vip)
	}
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["ignore_resource_deletion"]}],
		"node": {"id": "client-vip", "locality": {"region": "r-east", "zone": "z-east"}, "metadata": {"CLUSTER_ID": "east", "NETWORK": "net1"}}
	}`, f.hub.XDSAddr().String())
	c := xdsClientOf(t, bootstrap, netip.AddrPortFrom(vip, 8080).String())
	eventually(t, c, "east")
	// East's endpoint goes: the ClusterSetIP fails over to west, as the
	// clusterset hostname does.
	f.setEndpoints("east", "net1", "z-east", nil)
	eventually(t, c, "west")
}

func TestXDSSplitHorizonThroughGateway(t *testing.T) {
	f := startXDSFleet(t)
	east := startBackend(t, "127.0.0.33", "east")
	west := startBackend(t, "127.0.0.43", "west")
	// West's east-west gateway: a stand-in that answers as the gateway, so
	// the test sees which address the client was given.
	gw := startBackend(t, "127.0.0.50", "west-gateway")
	f.cluster(t, "east", "net-a", "z-east", nil, east)
	f.cluster(t, "west", "net-b", "z-west", []*federationpb.Gateway{{
		Address: gw.addr, Port: gw.port, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS,
	}}, west)

	c := xdsClient(t, f.hub.XDSAddr().String(), "client-a", "east", "net-a", "r-east", "z-east")
	eventually(t, c, "east")
	// Without east's endpoints the client reaches west only through its
	// gateway: it never receives west's pod address.
	f.setEndpoints("east", "net-a", "z-east", nil)
	eventually(t, c, "west-gateway")
}

// TestXDSGRPCClientDrainingEndpoints: a terminating endpoint that still
// serves is no priority of a gRPC client's (grpc-go ignores DRAINING
// endpoints): a client in its zone is served by the next locality, and
// never by it.
func TestXDSGRPCClientDrainingEndpoints(t *testing.T) {
	f := startXDSFleet(t)
	draining := startBackend(t, "127.0.0.35", "east-draining")
	ready := startBackend(t, "127.0.0.36", "east")
	f.cluster(t, "east", "net1", "z1", nil)
	d := echoEndpoint(draining, "r1", "z1")
	d.Ready, d.Terminating = false, true
	f.setShard("east", "net1", nil, []*federationpb.Endpoint{d, echoEndpoint(ready, "r1", "z2")})
	c := xdsClient(t, f.hub.XDSAddr().String(), "client-z1", "east", "net1", "r1", "z1")
	eventually(t, c, "east")
	// What the hub sends a gRPC client there: the ready endpoint alone, at
	// the first priority (no empty priority of the draining one before it).
	ads := istiodtest.Dial(t, f.hub.XDSAddr().String(), istiodtest.Proxy{
		IP: "10.9.0.1", Pod: "client-ads", Namespace: "demo", ClusterID: "east", Network: "net1",
		Locality: &corev3.Locality{Region: "r1", Zone: "z1"}, Proxyless: true,
	})
	ads.WaitCluster(t, "outbound|8080||echo.demo.svc.cluster.local")
	cla := ads.WaitEDS(t, "outbound|8080||echo.demo.svc.cluster.local", func(cla *endpointv3.ClusterLoadAssignment) bool { return cla != nil })
	if got := istiodtest.Endpoints(cla); len(got) != 1 || got[0].Address != net.JoinHostPort(ready.addr, fmt.Sprint(ready.port)) || got[0].Priority != 0 {
		t.Errorf("a gRPC client in z1 was sent %v, want only the ready endpoint, at priority 0", got)
	}
	var sent []string
	for _, p := range f.hub.XDS().Proxies() {
		sent = append(sent, p.Kind)
	}
	if len(sent) != 2 || sent[0] != "grpc" || sent[1] != "grpc" {
		t.Errorf("proxy kinds %v, want the two gRPC clients", sent)
	}
}

// TestXDSGatewayOnlyForMeshTLS: an east-west gateway forwards only Istio
// mTLS, so a network whose endpoints take plaintext is reached through
// none. A client with no locality preference weighs every entry alike:
// given the gateway, it would send it about half of its calls.
func TestXDSGatewayOnlyForMeshTLS(t *testing.T) {
	f := startXDSFleet(t)
	east := startBackend(t, "127.0.0.37", "east")
	gw := startBackend(t, "127.0.0.51", "west-gateway")
	gateways := []*federationpb.Gateway{{Address: gw.addr, Port: gw.port, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS}}
	f.cluster(t, "east", "net-a", "z-east", nil, east)
	f.cluster(t, "west", "net-b", "z-west", gateways)
	plain := echoEndpoint(backend{addr: "127.0.0.47", port: 8080}, "r-west", "z-west")
	plain.Plaintext = true
	f.setShard("west", "net-b", gateways, []*federationpb.Endpoint{plain})
	await(t, f.hub.Registry(), "west's plaintext endpoint", func(s clusterset.Snapshot) bool {
		v, ok := s.Service("demo/echo")
		return ok && len(v.Clusters) == 2 && len(v.Clusters[1].Endpoints) == 1
	})
	c := xdsClient(t, f.hub.XDSAddr().String(), "client-anywhere", "east", "net-a", "", "")
	eventually(t, c, "east")
	if got, err := servedBy(t.Context(), c, 40); err != nil || got["east"] != 40 {
		t.Errorf("calls served by %v (%v), want all 40 by east", got, err)
	}
	// The pod enrols in the mesh: the gateway stands for it.
	plain.Plaintext = false
	f.setShard("west", "net-b", gateways, []*federationpb.Endpoint{plain})
	if !testwait.Within(30*time.Second, func() (bool, string) {
		got, err := servedBy(t.Context(), c, 20)
		return err == nil && got["west-gateway"] > 0, fmt.Sprint(got, err)
	}) {
		t.Fatal("no call reached west's gateway once its endpoint took mTLS")
	}
}

// TestXDSOverTLS: grpc-go's xDS client reaches the hub's xDS port over TLS
// (its "tls" channel credentials, verifying the hub's certificate).
func TestXDSOverTLS(t *testing.T) {
	certs := t.TempDir()
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.XDSCertFile, cfg.XDSKeyFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key")
	h, err := hub.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, h.Run)
	f := &xdsFleet{hub: h, trackers: map[string]tracker{}}
	f.cluster(t, "east", "net1", "z-east", nil, startBackend(t, "127.0.0.35", "east"))

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q}}],
		  "server_features": ["ignore_resource_deletion"]}],
		"node": {"id": "tls-client", "locality": {"region": "r-east", "zone": "z-east"}, "metadata": {"CLUSTER_ID": "east"}}
	}`, "localhost:"+portOf(h.XDSAddr().String()), filepath.Join(certs, "ca.crt"))
	eventually(t, xdsClientWith(t, bootstrap), "east")
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
