package clusterset

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

const (
	tls   = federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS
	hbone = federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE
)

func gw(addr string, port uint32, p federationpb.GatewayProtocol) *federationpb.Gateway {
	return &federationpb.Gateway{Address: addr, Port: port, Protocol: p}
}

func onNetwork(g *federationpb.Gateway, n string) *federationpb.Gateway {
	g.Network = n
	return g
}

func TestGateways(t *testing.T) {
	clusters := []*ClusterInfo{
		{ID: "east", Network: "net-east", Gateways: []*federationpb.Gateway{
			gw("192.0.2.2", 15443, tls),
			gw("192.0.2.1", 15443, tls),
			gw("192.0.2.1", 15008, hbone),
			onNetwork(gw("192.0.2.9", 15443, tls), "net-edge"),
			gw("192.0.2.3", 0, tls), // no port: no gateway
		}},
		// A second cluster of net-east reports the same gateway.
		{ID: "east2", Network: "net-east", Gateways: []*federationpb.Gateway{gw("192.0.2.1", 15443, tls), gw("gw.east.example.com", 15443, tls)}},
		{ID: "north", Network: "net-north", Gateways: []*federationpb.Gateway{gw("gw.north.example.com", 15008, hbone)}},
		{ID: "west", Network: "net-west", Gateways: []*federationpb.Gateway{gw("192.0.2.20", 15008, hbone)}},
		nil,
	}
	g := NewGateways(clusters)
	mtls := map[federation.NetworkID][]string{}
	tunnels := map[federation.NetworkID]string{}
	for _, n := range []federation.NetworkID{"net-east", "net-edge", "net-north", "net-west"} {
		for _, m := range g.MTLS(n) {
			mtls[n] = append(mtls[n], fmt.Sprintf("%s:%d", m.GetAddress(), m.GetPort()))
		}
		if tun, ok := g.Tunnel(n); ok {
			tunnels[n] = fmt.Sprintf("%s %s:%d hbone %d", tun.Cluster, tun.GetAddress(), tun.GetPort(), tun.HBONEPort())
		}
	}
	// Each network's mTLS gateways, sorted and once each, DNS names
	// included.
	if diff := cmp.Diff(map[federation.NetworkID][]string{
		"net-east": {"192.0.2.1:15443", "192.0.2.2:15443", "gw.east.example.com:15443"},
		"net-edge": {"192.0.2.9:15443"},
	}, mtls); diff != "" {
		t.Errorf("MTLS (-want +got):\n%s", diff)
	}
	// One tunnel per network: HBONE first, by IP only; an mTLS gateway
	// takes HBONE on 15008.
	if diff := cmp.Diff(map[federation.NetworkID]string{
		"net-east": "east 192.0.2.1:15008 hbone 15008",
		"net-edge": "east 192.0.2.9:15443 hbone 15008",
		"net-west": "west 192.0.2.20:15008 hbone 15008",
	}, tunnels); diff != "" {
		t.Errorf("Tunnel (-want +got):\n%s", diff)
	}
	var all []string
	for _, a := range g.All() {
		all = append(all, fmt.Sprintf("%s/%s %s:%d", a.Cluster, a.Into, a.GetAddress(), a.GetPort()))
	}
	if diff := cmp.Diff([]string{
		"east/net-east 192.0.2.2:15443", "east/net-east 192.0.2.1:15443", "east/net-east 192.0.2.1:15008", "east/net-edge 192.0.2.9:15443",
		"east2/net-east 192.0.2.1:15443", "east2/net-east gw.east.example.com:15443",
		"north/net-north gw.north.example.com:15008", "west/net-west 192.0.2.20:15008",
	}, all); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
	if !g.Equal(NewGateways(clusters)) {
		t.Error("gateways differ from the same clusters'")
	}
	clusters[3] = &ClusterInfo{ID: "west", Network: "net-west", Gateways: []*federationpb.Gateway{gw("192.0.2.21", 15008, hbone)}}
	if g.Equal(NewGateways(clusters)) {
		t.Error("gateways equal after one moved")
	}
	var none *Gateways
	if none.MTLS("net-east") != nil || len(none.All()) != 0 || !none.Equal(NewGateways(nil)) {
		t.Error("nil gateways are not empty")
	}
	if _, ok := none.Tunnel("net-east"); ok {
		t.Error("nil gateways have a tunnel")
	}
}
