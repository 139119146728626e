//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/spoke/shard"
)

func bytesOf(h *memHub, from int) (msgs, n int) {
	got := h.received()
	for _, c := range got[from:] {
		n += proto.Size(c)
	}
	return len(got) - from, n
}

// BenchmarkInitialSync measures the time from a spoke starting with a
// shard of N endpoints to the hub's registry showing all of them, over the
// in-memory gRPC transport (chunked at the default 4 MiB).
func BenchmarkInitialSync(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			var total time.Duration
			var wire int
			for b.Loop() {
				h := newMemHub(b, registry.Limits{}, 4<<20)
				tr := newTracker()
				fill(tr, "east", "n1", n)
				start := time.Now()
				runUplink(b, "east", tr, (&killableDialer{client: h.client}).dial)
				await(b, h.reg, "initial sync", func(s clusterset.Snapshot) bool { return len(endpointsOf(s, "demo/echo", "east")) == n })
				total += time.Since(start)
				_, wire = bytesOf(h, 0)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/sync")
			b.ReportMetric(float64(wire), "bytes/sync")
		})
	}
}

// BenchmarkEndpointChange measures one endpoint change after the initial
// sync: the bytes the spoke sends (independent of the shard's size) and
// the time until the hub's registry shows it.
func BenchmarkEndpointChange(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			h := newMemHub(b, registry.Limits{}, 4<<20)
			tr := newTracker()
			fill(tr, "east", "n1", n)
			runUplink(b, "east", tr, (&killableDialer{client: h.client}).dial)
			await(b, h.reg, "initial sync", func(s clusterset.Snapshot) bool { return len(endpointsOf(s, "demo/echo", "east")) == n })
			from := len(h.received())
			eps := testEndpoints("demo", "echo", n, 1)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				ready := i%2 == 1
				eps[0] = proto.CloneOf(eps[0])
				eps[0].Ready = ready
				tr.Update(time.Now(), true, func(w shard.Writer) { must(w.SetEndpoints("demo/echo", eps)) })
				await(b, h.reg, "the change", func(s clusterset.Snapshot) bool {
					v, ok := s.Service("demo/echo")
					return ok && v.Clusters[0].Endpoints[0].GetReady() == ready
				})
			}
			b.StopTimer()
			msgs, wire := bytesOf(h, from)
			if msgs > 0 {
				b.ReportMetric(float64(wire)/float64(msgs), "bytes/change")
			}
		})
	}
}
