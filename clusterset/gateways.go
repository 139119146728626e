package clusterset

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// DefaultHBONEPort is where a gateway takes HBONE when it says nothing
// else: Istio's east-west gateways listen for it there beside their mTLS
// port.
const DefaultHBONEPort = 15008

// Gateway is an east-west gateway as a member cluster reports it.
type Gateway struct {
	Cluster federation.ClusterID
	// Into is the network the gateway leads into: the gateway's own
	// (GetNetwork), else its cluster's.
	Into federation.NetworkID
	*federationpb.Gateway
}

// HBONEPort is where a ztunnel tunnels into the gateway: its port when it
// takes HBONE, else DefaultHBONEPort.
func (g Gateway) HBONEPort() uint32 {
	if g.GetProtocol() == federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE {
		return g.GetPort()
	}
	return DefaultHBONEPort
}

// Gateways are the member clusters' east-west gateways, by the network
// they lead into. Clusters whose spokes have gone keep theirs: while their
// endpoints are served (stale), they must stay reachable. Immutable; a
// snapshot builds them once per change of the clusters.
type Gateways struct {
	all    []Gateway
	mtls   map[federation.NetworkID][]*federationpb.Gateway
	tunnel map[federation.NetworkID]Gateway
}

// NewGateways indexes the gateways of clusters (sorted by ID).
func NewGateways(clusters []*ClusterInfo) *Gateways {
	g := &Gateways{mtls: map[federation.NetworkID][]*federationpb.Gateway{}, tunnel: map[federation.NetworkID]Gateway{}}
	for _, c := range clusters {
		if c == nil {
			continue
		}
		for _, pb := range c.Gateways {
			if pb.GetAddress() == "" || pb.GetPort() == 0 || pb.GetPort() > 65535 {
				continue
			}
			gw := Gateway{Cluster: c.ID, Into: c.Network, Gateway: pb}
			if pb.GetNetwork() != "" {
				gw.Into = federation.NetworkID(pb.GetNetwork())
			}
			g.all = append(g.all, gw)
			if pb.GetProtocol() == federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS {
				g.mtls[gw.Into] = append(g.mtls[gw.Into], pb)
			}
			if _, err := netip.ParseAddr(pb.GetAddress()); err != nil {
				continue // a ztunnel reaches a gateway by its network address
			}
			if old, ok := g.tunnel[gw.Into]; !ok || tunnelLess(gw, old) {
				g.tunnel[gw.Into] = gw
			}
		}
	}
	for n, gws := range g.mtls {
		// Two clusters of one network may report the same gateway.
		slices.SortStableFunc(gws, compareGateway)
		g.mtls[n] = slices.CompactFunc(gws, func(a, b *federationpb.Gateway) bool { return compareGateway(a, b) == 0 })
	}
	return g
}

// tunnelLess orders the candidates for a network's one tunnel: HBONE
// gateways first, then by cluster, address and port.
func tunnelLess(a, b Gateway) bool {
	ah := a.GetProtocol() == federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE
	bh := b.GetProtocol() == federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE
	if ah != bh {
		return ah
	}
	return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), compareGateway(a.Gateway, b.Gateway)) < 0
}

func compareGateway(a, b *federationpb.Gateway) int {
	return cmp.Or(strings.Compare(a.GetAddress(), b.GetAddress()), cmp.Compare(a.GetPort(), b.GetPort()))
}

// All returns every gateway, by cluster and in the order its cluster
// reports them: a gateway two clusters report is there twice.
func (g *Gateways) All() []Gateway {
	if g == nil {
		return nil
	}
	return g.all
}

// MTLS returns the gateways into network n that forward Istio mutual TLS
// by SNI (port 15443), sorted by address and port, each once. Their
// addresses may be DNS names.
func (g *Gateways) MTLS(n federation.NetworkID) []*federationpb.Gateway {
	if g == nil {
		return nil
	}
	return g.mtls[n]
}

// Tunnel returns the one gateway into network n that ztunnels tunnel
// through (HBONE on its HBONEPort), chosen alike at every replica: an
// HBONE gateway before an mTLS one, then by cluster, address and port.
// Only gateways with an IP address qualify.
func (g *Gateways) Tunnel(n federation.NetworkID) (Gateway, bool) {
	if g == nil {
		return Gateway{}, false
	}
	gw, ok := g.tunnel[n]
	return gw, ok
}

// Equal reports whether g and o hold the same gateways, reported by the
// same clusters. A snapshot keeps its predecessor's Gateways while they
// are equal, so that readers mostly compare pointers.
func (g *Gateways) Equal(o *Gateways) bool {
	if g == o {
		return true
	}
	return slices.EqualFunc(g.All(), o.All(), func(a, b Gateway) bool {
		return a.Cluster == b.Cluster && a.Into == b.Into && a.EqualVT(b.Gateway)
	})
}
