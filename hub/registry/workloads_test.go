package registry

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

func testWorkload(uid string, ready bool) *clusterset.Workload {
	return clusterset.NewWorkload("east", &federationpb.Workload{Uid: uid, Name: "pod-" + uid, Ready: ready})
}

// TestWorkloadsAgainstAMap: random edits of the sorted buckets read as a
// map would, and never change the workloads they started from.
func TestWorkloadsAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var ws []*clusterset.Workload
	want := map[string]bool{} // uid → ready
	for i := range 300 {
		uid := fmt.Sprintf("uid-%d", rng.IntN(200))
		ws = append(ws, testWorkload(uid, i%2 == 0))
		want[uid] = i%2 == 0 // the last of a uid given twice wins
	}
	m := newWorkloads(ws)
	check := func(m *workloads, want map[string]bool) {
		t.Helper()
		if m.len != len(want) {
			t.Fatalf("len %d, want %d", m.len, len(want))
		}
		n := 0
		m.all(func(w *clusterset.Workload) {
			n++
			if ready, ok := want[w.GetUid()]; !ok || ready != w.GetReady() {
				t.Fatalf("%s (ready %v) held, want %v, %v", w.GetUid(), w.GetReady(), ready, ok)
			}
			if got, ok := m.get(w.GetUid()); !ok || got != w {
				t.Fatalf("get(%s) does not find it", w.GetUid())
			}
		})
		if n != len(want) {
			t.Fatalf("all gave %d, want %d", n, len(want))
		}
	}
	check(&m, want)
	for round := range 50 {
		base, baseWant := m, maps.Clone(want)
		e := newWorkloadsEdit(&m)
		for range 1 + rng.IntN(20) {
			uid := fmt.Sprintf("uid-%d", rng.IntN(220))
			if rng.IntN(3) == 0 {
				e.delete(uid)
				delete(want, uid)
			} else {
				ready := rng.IntN(2) == 0
				e.set(testWorkload(uid, ready))
				want[uid] = ready
			}
		}
		m = e.done()
		check(&m, want)
		check(&base, baseWant)
		if _, ok := m.get(fmt.Sprintf("absent-%d", round)); ok {
			t.Fatal("found an absent uid")
		}
	}
	var zero workloads
	if _, ok := zero.get("uid-1"); ok || zero.len != 0 {
		t.Error("the zero value is not empty")
	}
}
