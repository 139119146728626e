package resources

import (
	"bytes"
	"math/rand/v2"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// TestEncodeLoadAssignment: the direct encoding decodes to the reference
// assignment, and is byte for byte its deterministic marshalling with each
// lb_endpoint's metadata moved last, over random service views.
func TestEncodeLoadAssignment(t *testing.T) {
	checked := 0
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b9))
		s, clusters, v := randomCase(r)
		gws := GatewaysByNetwork(clusters, tls)
		for _, h := range Hostnames(s) {
			for _, p := range s.Ports {
				want := ReferenceLoadAssignment(s, h, p, v, gws)
				got := EncodeLoadAssignment(s, h, p, v, gws)
				var decoded endpointv3.ClusterLoadAssignment
				if err := proto.Unmarshal(got, &decoded); err != nil {
					t.Fatalf("seed %d: the encoding does not decode: %v", seed, err)
				}
				if !proto.Equal(&decoded, want) {
					t.Fatalf("seed %d: decodes to\n%v\nwant\n%v", seed, &decoded, want)
				}
				ref, err := proto.MarshalOptions{Deterministic: true}.Marshal(metadataLast(want))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, ref) {
					t.Fatalf("seed %d: bytes differ from the marshalled assignment", seed)
				}
				checked += len(want.GetEndpoints())
			}
		}
	}
	if checked < 300 {
		t.Errorf("only %d locality groups checked", checked)
	}
}

// metadataLast moves each lb_endpoint's metadata into its unknown fields,
// which marshalling writes after the known ones.
func metadataLast(cla *endpointv3.ClusterLoadAssignment) *endpointv3.ClusterLoadAssignment {
	cla = proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	for _, l := range cla.GetEndpoints() {
		for _, lb := range l.GetLbEndpoints() {
			if m := lb.GetMetadata(); m != nil {
				b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
				lb.Metadata = nil
				lb.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, lbMetadata, protowire.BytesType), b))
			}
		}
	}
	return cla
}

// loadAssignment decodes EncodeLoadAssignment's result, for the tests of
// what proxies are sent.
func loadAssignment(t testing.TB, s *federation.ServiceView, hostname string, port *federationpb.ServicePort, view View, gateways map[federation.NetworkID][]*federationpb.Gateway) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	var cla endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(EncodeLoadAssignment(s, hostname, port, view, gateways), &cla); err != nil {
		t.Fatalf("the encoded assignment does not decode: %v", err)
	}
	return &cla
}
