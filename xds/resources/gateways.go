package resources

import (
	"cmp"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// GatewaysByNetwork indexes the clusterset's east-west gateways of the given
// protocol by the network they serve: Gateway.network, else the network of
// the cluster that reported the gateway. Each network's gateways are sorted
// by address and port, without duplicates (two clusters of one network may
// report the same gateway).
//
// Disconnected clusters keep their gateways: the registry decides when a
// lost cluster's endpoints are withdrawn, and while they are still served
// they must stay reachable.
//
// DNS-named gateways are kept here (other consumers, such as the workload
// API, can use names); LoadAssignment skips them.
func GatewaysByNetwork(clusters []*federation.ClusterInfo, protocol federationpb.GatewayProtocol) map[federation.NetworkID][]*federationpb.Gateway {
	out := make(map[federation.NetworkID][]*federationpb.Gateway)
	for _, c := range clusters {
		if c == nil {
			continue
		}
		for _, g := range c.Gateways {
			if g.GetProtocol() != protocol || g.GetAddress() == "" || g.GetPort() == 0 || g.GetPort() > 65535 {
				continue
			}
			n := c.Network
			if g.GetNetwork() != "" {
				n = federation.NetworkID(g.GetNetwork())
			}
			out[n] = append(out[n], g)
		}
	}
	for n, gws := range out {
		slices.SortStableFunc(gws, compareGateway)
		out[n] = slices.CompactFunc(gws, func(a, b *federationpb.Gateway) bool { return compareGateway(a, b) == 0 })
	}
	return out
}

func compareGateway(a, b *federationpb.Gateway) int {
	return cmp.Or(strings.Compare(a.GetAddress(), b.GetAddress()), cmp.Compare(a.GetPort(), b.GetPort()))
}
