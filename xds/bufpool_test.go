package xds

import (
	"testing"

	"google.golang.org/grpc/mem"
)

// recordingPool counts what reaches the pool behind boundedPool.
type recordingPool struct{ gets, puts int }

func (p *recordingPool) Get(n int) *[]byte {
	p.gets++
	b := make([]byte, n)
	return &b
}

func (p *recordingPool) Put(*[]byte) { p.puts++ }

var _ mem.BufferPool = (*recordingPool)(nil)

func TestBoundedPoolKeepsNoLargeBuffers(t *testing.T) {
	inner := &recordingPool{}
	p := boundedPool{inner}
	small, large := p.Get(4096), p.Get(maxPooledBuffer+1)
	if len(*small) != 4096 || len(*large) != maxPooledBuffer+1 {
		t.Fatalf("got buffers of %d and %d bytes", len(*small), len(*large))
	}
	p.Put(small)
	p.Put(large)
	if inner.gets != 1 || inner.puts != 1 {
		t.Errorf("the pool saw %d gets and %d puts, want only the small buffer's", inner.gets, inner.puts)
	}
}
