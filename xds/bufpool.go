package xds

import "google.golang.org/grpc/mem"

// maxPooledBuffer is the largest buffer the xDS server keeps for reuse.
const maxPooledBuffer = 1 << 20

// boundedPool is grpc-go's default buffer pool for buffers up to
// maxPooledBuffer; larger ones are allocated and left to the GC. A
// ztunnel's first response holds every address of its network (tens of
// megabytes): pooled, each such buffer stayed in the heap long after the
// response was sent (164 MB with 20 ztunnels in the load harness).
type boundedPool struct{ mem.BufferPool }

func (p boundedPool) Get(n int) *[]byte {
	if n > maxPooledBuffer {
		b := make([]byte, n)
		return &b
	}
	return p.BufferPool.Get(n)
}

func (p boundedPool) Put(b *[]byte) {
	if cap(*b) > maxPooledBuffer {
		return
	}
	p.BufferPool.Put(b)
}
