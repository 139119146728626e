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

// encode returns the record of m as an element of field. It fails for
// messages proto.Marshal rejects (strings that are not UTF-8).
func encode(field protowire.Number, m proto.Message) (record, error) {
	n := proto.Size(m)
	b := make([]byte, 0, protowire.SizeTag(field)+protowire.SizeBytes(n))
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	if err != nil {
		return "", err
	}
	return record(b), nil
}

// removal returns the record of a removed object's key.
func removal(field protowire.Number, key string) record {
	b := protowire.AppendTag(nil, field, protowire.BytesType)
	return record(protowire.AppendString(b, key))
}

// chunker packs records into updates whose encodings stay under a size.
type chunker struct {
	head   *federationpb.ShardUpdate // the first chunk, before its records
	budget int                       // 0: no limit
	out    []*federationpb.ShardUpdate
	raw    []byte // the current chunk's records
	size   int    // the current chunk's encoded size
}

// chunkOverhead leaves room for a chunk's more flag and the envelope
// around it.
const chunkOverhead = 1024

func newChunker(head *federationpb.ShardUpdate, maxBytes int) *chunker {
	c := &chunker{head: head, out: []*federationpb.ShardUpdate{head}, size: proto.Size(head)}
	if maxBytes > 0 {
		c.budget = max(maxBytes-chunkOverhead, 1)
	}
	return c
}

// add appends r to the current chunk, or to a new one when it would not
// fit (a record larger than the budget gets a chunk of its own).
func (c *chunker) add(r record) {
	if c.budget > 0 && c.size+len(r) > c.budget && len(c.raw) > 0 {
		c.flush()
		c.out = append(c.out, &federationpb.ShardUpdate{
			Version: c.head.GetVersion(), Nonce: c.head.GetNonce(), Full: c.head.GetFull(),
		})
		c.size = proto.Size(c.out[len(c.out)-1])
	}
	c.raw = append(c.raw, r...)
	c.size += len(r)
}

// flush gives the current chunk its records.
func (c *chunker) flush() {
	if len(c.raw) > 0 {
		c.out[len(c.out)-1].ProtoReflect().SetUnknown(c.raw)
		c.raw = nil
	}
}

// done returns the chunks, all but the last with more set.
func (c *chunker) done() []*federationpb.ShardUpdate {
	c.flush()
	for _, u := range c.out[:len(c.out)-1] {
		u.More = true
	}
	return c.out
}
