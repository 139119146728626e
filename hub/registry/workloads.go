package registry

import (
	"slices"
	"strings"

	"github.com/meshfed/meshfed/clusterset"
)

// workloadBuckets is how many sorted slices a cluster's workloads are
// split into: a change copies one, a sixteenth of its cluster's.
const workloadBuckets = 16

// workloads are one cluster's workloads by uid, copy on write: each
// bucket is a slice sorted by uid, 8 bytes a workload where a map's entry
// is five to nine times that. Its shard and every snapshot share it; a
// published value is never written again, writers go through a
// workloadsEdit. The zero value is empty.
type workloads struct {
	buckets [][]*clusterset.Workload
	len     int
}

func bucketOfUID(uid string) int { return int(fnv1a(uid) % workloadBuckets) }

func compareUID(w *clusterset.Workload, uid string) int { return strings.Compare(w.GetUid(), uid) }

func (m *workloads) get(uid string) (*clusterset.Workload, bool) {
	if m.buckets == nil {
		return nil, false
	}
	b := m.buckets[bucketOfUID(uid)]
	if i, ok := slices.BinarySearchFunc(b, uid, compareUID); ok {
		return b[i], true
	}
	return nil, false
}

// all calls fn for every workload, in no particular order.
func (m *workloads) all(fn func(w *clusterset.Workload)) {
	for _, b := range m.buckets {
		for _, w := range b {
			fn(w)
		}
	}
}

// newWorkloads returns the workloads ws, the last of any uid given twice.
func newWorkloads(ws []*clusterset.Workload) workloads {
	m := workloads{buckets: make([][]*clusterset.Workload, workloadBuckets)}
	counts := make([]int, workloadBuckets)
	for _, w := range ws {
		counts[bucketOfUID(w.GetUid())]++
	}
	for i, n := range counts {
		if n > 0 {
			m.buckets[i] = make([]*clusterset.Workload, 0, n)
		}
	}
	for _, w := range ws {
		i := bucketOfUID(w.GetUid())
		m.buckets[i] = append(m.buckets[i], w)
	}
	for i, b := range m.buckets {
		slices.SortStableFunc(b, func(a, b *clusterset.Workload) int { return strings.Compare(a.GetUid(), b.GetUid()) })
		// Keep the last of equal uids: compact keeps the first, so
		// reverse around it.
		slices.Reverse(b)
		b = slices.CompactFunc(b, func(a, b *clusterset.Workload) bool { return a.GetUid() == b.GetUid() })
		slices.Reverse(b)
		m.buckets[i] = slices.Clip(b)
		m.len += len(b)
	}
	return m
}

// workloadsEdit builds new workloads from old ones without changing the
// old.
type workloadsEdit struct {
	m     workloads
	owned [workloadBuckets]bool
}

func newWorkloadsEdit(base *workloads) *workloadsEdit {
	e := &workloadsEdit{m: workloads{buckets: make([][]*clusterset.Workload, workloadBuckets), len: base.len}}
	copy(e.m.buckets, base.buckets)
	return e
}

// bucket returns the bucket of uid, copied the first time it is edited,
// with room for one more.
func (e *workloadsEdit) bucket(uid string) int {
	i := bucketOfUID(uid)
	if !e.owned[i] {
		old := e.m.buckets[i]
		e.m.buckets[i] = append(make([]*clusterset.Workload, 0, len(old)+1), old...)
		e.owned[i] = true
	}
	return i
}

// get returns the workload with uid as edited so far, nil if none.
func (e *workloadsEdit) get(uid string) *clusterset.Workload {
	w, _ := e.m.get(uid)
	return w
}

func (e *workloadsEdit) set(w *clusterset.Workload) {
	i := e.bucket(w.GetUid())
	b := e.m.buckets[i]
	j, ok := slices.BinarySearchFunc(b, w.GetUid(), compareUID)
	if ok {
		b[j] = w
		return
	}
	e.m.buckets[i] = slices.Insert(b, j, w)
	e.m.len++
}

func (e *workloadsEdit) delete(uid string) {
	if _, ok := e.m.get(uid); !ok {
		return
	}
	i := e.bucket(uid)
	b := e.m.buckets[i]
	j, _ := slices.BinarySearchFunc(b, uid, compareUID)
	e.m.buckets[i] = slices.Delete(b, j, j+1)
	e.m.len--
}

func (e *workloadsEdit) done() workloads { return e.m }
