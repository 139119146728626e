package resources

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// loadAssignment decodes EncodeLoadAssignment's result, for the tests of
// what proxies are sent.
func loadAssignment(t testing.TB, s *clusterset.ServiceView, hostname string, port *federationpb.ServicePort, view View, gateways *clusterset.Gateways) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	var cla endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(EncodeLoadAssignment(s, hostname, port, view, gateways), &cla); err != nil {
		t.Fatalf("the encoded assignment does not decode: %v", err)
	}
	return &cla
}
