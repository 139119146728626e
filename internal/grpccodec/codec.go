// Package grpccodec is grpc-go's protobuf codec with one change: buffers
// of large messages are not pooled.
package grpccodec

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// maxPooledMessage is the largest encoded message whose buffer goes back
// to grpc-go's buffer pool.
const maxPooledMessage = 1 << 20

// Codec is grpc-go's protobuf codec except that it leaves the buffers of
// messages over maxPooledMessage to the GC. Pooled, buffers of rare large
// messages stay in the heap long after they were sent: a ztunnel's first
// response holds every address of its network (tens of megabytes each),
// and a spoke's initial sync goes out in chunks of megabytes.
type Codec struct{}

// Name is the codec's content subtype, the same as grpc-go's.
func (Codec) Name() string { return "proto" }

// Encoded is a message encoded already, sent as Body followed by Tail
// without a copy: a large message sent on many streams alike is encoded
// once, and Tail carries what differs per stream (fields encoded alone).
// Body must not change once given.
type Encoded struct {
	Body, Tail []byte
}

// Marshal encodes v.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(Encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.Body), mem.SliceBuffer(e.Tail)}, nil
	}
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: cannot marshal %T", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
	if mem.IsBelowBufferPoolingThreshold(size) || size > maxPooledMessage {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}
