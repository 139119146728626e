package federation

import "github.com/meshfed/meshfed/federation/federationpb"

// ViaGateway reports whether ep, an endpoint of an import's source sent
// to a spoke on network receiver, is an east-west gateway that stands for
// the endpoints of the network it names. The hub sends an endpoint on the
// receiver's network as it is (its network, if set, the receiver's), and
// one on another network only behind that network's gateways, with the
// network they lead into (federationpb.ImportSource): which of the two it
// is needs nothing but the endpoint.
func ViaGateway(ep *federationpb.Endpoint, receiver string) bool {
	return ep.GetNetwork() != "" && ep.GetNetwork() != receiver
}
