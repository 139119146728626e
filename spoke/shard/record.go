package shard

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// A record is one object as it travels inside a ShardUpdate: the tag of its
// field, its length and its encoding. Protobuf lets a repeated field's
// elements appear anywhere in a message, so an update is its header
// followed by records, in any order, and the hub decodes them as it would
// decode the update's own fields.
//
// Equal objects have equal records: proto.Marshal is deterministic within
// one binary for messages without maps, which federation messages are.
type record string

// The ShardUpdate fields records belong to.
var (
	fieldServices         = shardUpdateField("services")
	fieldEndpoints        = shardUpdateField("endpoints")
	fieldWorkloads        = shardUpdateField("workloads")
	fieldRemovedServices  = shardUpdateField("removed_services")
	fieldRemovedEndpoints = shardUpdateField("removed_endpoints")
	fieldRemovedWorkloads = shardUpdateField("removed_workloads")
)

func shardUpdateField(name protoreflect.Name) protowire.Number {
	f := (&federationpb.ShardUpdate{}).ProtoReflect().Descriptor().Fields().ByName(name)
	if f == nil || f.Cardinality() != protoreflect.Repeated {
		panic("federationpb.ShardUpdate has no repeated field " + name)
	}
	return f.Number()
}

// appendRecord appends the record of m as an element of field to b. It
// fails for messages proto.Marshal rejects (strings that are not UTF-8).
func appendRecord(b []byte, field protowire.Number, m proto.Message) ([]byte, error) {
	n := proto.Size(m)
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
}

// removal returns the record of a removed object's key.
func removal(field protowire.Number, key string) record {
	b := protowire.AppendTag(nil, field, protowire.BytesType)
	return record(protowire.AppendString(b, key))
}

// Update is an update the tracker handed out: chunks whose encodings stay
// under a size, each encoded when taken. Until then a chunk holds only
// references to its records, and the update lets go of a chunk once it is
// taken: a cluster's first update (its whole shard) is never in memory
// twice.
type Update struct {
	version uint64
	full    bool
	chunks  []*federationpb.ShardUpdate // headers, until taken
	recs    [][]record                  // each chunk's records, until taken
}

// Version is the update's version.
func (u *Update) Version() uint64 { return u.version }

// Full reports whether the update is the full state.
func (u *Update) Full() bool { return u.full }

// Len is the number of chunks.
func (u *Update) Len() int { return len(u.chunks) }

// Chunk returns chunk i with its records encoded. Each chunk can be taken
// once: the update forgets it then (nil the second time).
func (u *Update) Chunk(i int) *federationpb.ShardUpdate {
	c, recs := u.chunks[i], u.recs[i]
	u.chunks[i], u.recs[i] = nil, nil
	if c == nil || len(recs) == 0 {
		return c
	}
	n := 0
	for _, r := range recs {
		n += len(r)
	}
	raw := make([]byte, 0, n)
	for _, r := range recs {
		raw = append(raw, r...)
	}
	c.ProtoReflect().SetUnknown(raw)
	return c
}

// chunker packs records into chunks whose encodings stay under a size.
type chunker struct {
	u      *Update
	budget int // 0: no limit
	size   int // the current chunk's encoded size
}

// chunkOverhead leaves room for a chunk's more flag and the envelope
// around it.
const chunkOverhead = 1024

func newChunker(head *federationpb.ShardUpdate, maxBytes int) *chunker {
	c := &chunker{
		u:    &Update{version: head.GetVersion(), full: head.GetFull(), chunks: []*federationpb.ShardUpdate{head}, recs: [][]record{nil}},
		size: proto.Size(head),
	}
	if maxBytes > 0 {
		c.budget = max(maxBytes-chunkOverhead, 1)
	}
	return c
}

// add appends r to the current chunk, or to a new one when it would not
// fit (a record larger than the budget gets a chunk of its own).
func (c *chunker) add(r record) {
	u := c.u
	last := len(u.chunks) - 1
	if c.budget > 0 && c.size+len(r) > c.budget && len(u.recs[last]) > 0 {
		head := u.chunks[0]
		u.chunks = append(u.chunks, &federationpb.ShardUpdate{Version: head.GetVersion(), Nonce: head.GetNonce(), Full: head.GetFull()})
		u.recs = append(u.recs, nil)
		last++
		c.size = proto.Size(u.chunks[last])
	}
	u.recs[last] = append(u.recs[last], r)
	c.size += len(r)
}

// done returns the update, all chunks but the last with more set.
func (c *chunker) done() *Update {
	for _, h := range c.u.chunks[:len(c.u.chunks)-1] {
		h.More = true
	}
	return c.u
}
