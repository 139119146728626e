package xds

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/google/go-cmp/cmp"
)

// TestPreencodedMetadataDecodesTheSame: what a proxy decodes is the
// assignment with its metadata, unchanged.
func TestPreencodedMetadataDecodesTheSame(t *testing.T) {
	st, _ := structpb.NewStruct(map[string]any{"cluster": "east", "network": "n1"})
	meta := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"meshfed": st}}
	build := func() *endpointv3.ClusterLoadAssignment {
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: "c", Endpoints: []*endpointv3.LocalityLbEndpoints{{}}}
		for _, a := range []string{"10.0.0.1", "10.0.0.2"} {
			cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{
					Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: a}},
				}}},
				Metadata: meta,
			})
		}
		return cla
	}
	want := build()
	got := build()
	preencodeMetadata(got)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var decoded endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, &decoded, protocmp.Transform()); diff != "" {
		t.Errorf("decoded assignment differs (-want +got):\n%s", diff)
	}
	again := build()
	preencodeMetadata(again)
	b2, _ := proto.MarshalOptions{Deterministic: true}.Marshal(again)
	if string(b) != string(b2) {
		t.Error("the encoding is not stable")
	}
}
