package ingest

import (
	"google.golang.org/grpc/mem"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
	"github.com/meshfed/meshfed/internal/grpccodec"
)

// Codec is the federation server's gRPC codec (grpc.ForceServerCodecV2):
// the hub's protobuf codec, except that a spoke's messages are decoded by
// syncproto.DecodeSpokeMessage, their endpoints' and workloads' strings
// pointing into the message rather than copied one by one.
type Codec struct{ grpccodec.Codec }

// Unmarshal decodes data into v.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*federationpb.SpokeMessage); ok {
		// A buffer of its own, not one of gRPC's pooled ones: the update's
		// endpoints and workloads point into it until the registry has
		// taken its copies, and the GC frees it after.
		return syncproto.DecodeSpokeMessage(data.Materialize(), m)
	}
	return c.Codec.Unmarshal(data, v)
}
