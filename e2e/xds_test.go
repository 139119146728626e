//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/pki"
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
		eps = append(eps, &federationpb.Endpoint{
			Namespace: "demo", Service: "echo", Address: b.addr, Ready: true, Serving: true,
			Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: b.port}},
			Locality: &federationpb.Locality{Region: "r-" + id, Zone: zone},
		})
	}
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
