package grpccodec

import (
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func TestCodecRoundTrips(t *testing.T) {
	for _, size := range []int{10, 64 << 10, 2 * maxPooledMessage} {
		in := &discovery.DiscoveryResponse{VersionInfo: strings.Repeat("v", size), Nonce: "n"}
		data, err := Codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Len(); got != proto.Size(in) {
			t.Errorf("size %d: encoded %d bytes, want %d", size, got, proto.Size(in))
		}
		var out discovery.DiscoveryResponse
		if err := (Codec{}).Unmarshal(data, &out); err != nil || !proto.Equal(in, &out) {
			t.Errorf("size %d: round trip: %v", size, err)
		}
		data.Free()
	}
	if _, err := (Codec{}).Marshal("not a message"); err == nil {
		t.Error("marshalled a string")
	}
	if err := (Codec{}).Unmarshal(mem.BufferSlice{}, new(int)); err == nil {
		t.Error("unmarshalled into an int")
	}
}
