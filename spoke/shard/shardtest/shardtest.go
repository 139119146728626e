// Package shardtest helps tests read what a shard.Tracker sends.
package shardtest

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Update is a shard.Update.
type Update interface {
	Len() int
	Chunk(i int) *federationpb.ShardUpdate
}

// Chunks returns every chunk of u.
func Chunks(u Update) []*federationpb.ShardUpdate {
	out := make([]*federationpb.ShardUpdate, u.Len())
	for i := range out {
		out[i] = u.Chunk(i)
	}
	return out
}

// Assemble returns the update that chunks (those of a Tracker's Next)
// make up, decoded as the hub decodes it: the tracker sends objects
// pre-encoded, so its chunks' own lists are empty until decoded. It
// returns nil for no chunks, and fails t when a chunk does not belong to
// the first's version or the last has more set.
func Assemble(t testing.TB, chunks []*federationpb.ShardUpdate) *federationpb.ShardUpdate {
	t.Helper()
	if len(chunks) == 0 {
		return nil
	}
	out := &federationpb.ShardUpdate{}
	for i, c := range chunks {
		if c.GetVersion() != chunks[0].GetVersion() || c.GetNonce() != chunks[0].GetNonce() || c.GetFull() != chunks[0].GetFull() {
			t.Fatalf("chunk %d is version %d/%q/full=%v, the first %d/%q/full=%v", i,
				c.GetVersion(), c.GetNonce(), c.GetFull(), chunks[0].GetVersion(), chunks[0].GetNonce(), chunks[0].GetFull())
		}
		if c.GetMore() != (i < len(chunks)-1) {
			t.Fatalf("chunk %d of %d has more=%v", i+1, len(chunks), c.GetMore())
		}
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		var d federationpb.ShardUpdate
		if err := proto.Unmarshal(b, &d); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		proto.Merge(out, &d)
	}
	out.More = false
	return out
}
