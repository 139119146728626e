package registry

import "strings"

// cowBuckets trades copy cost per snapshot (the bucket array) against copy
// cost per changed key (one bucket).
const cowBuckets = 256

// cowGroup is how many buckets the keys of one cluster share in a
// grouped cowMap. A cluster's full state then rewrites a sixteenth of the
// workloads, not every bucket: at 1,000 clusters, each full state had
// copied the whole clusterset's workloads. The price is a cluster of more
// than a sixteenth of them, whose changes clone larger buckets.
const cowGroup = 16

// cowMap is a string-keyed map whose copies share storage: copying costs
// one array of bucket pointers, and a change clones only the bucket it
// touches. Snapshots use it so that publishing a change to one of 100,000
// workloads does not copy the other 99,999. A cowMap value that has been
// published is never written again; writers go through a cowEdit.
type cowMap[V any] struct {
	buckets [cowBuckets]map[string]V
	len     int
	// grouped: keys are "cluster/..." and each cluster's keys share
	// cowGroup buckets.
	grouped bool
}

func (m *cowMap[V]) bucketOf(key string) int {
	if !m.grouped {
		return int(fnv1a(key) % cowBuckets)
	}
	cluster, rest, _ := strings.Cut(key, "/")
	return int((fnv1a(cluster) + fnv1a(rest)%cowGroup) % cowBuckets)
}

// fnv1a is cheap, stable, and good enough to spread keys.
func fnv1a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func (m *cowMap[V]) get(key string) (V, bool) {
	v, ok := m.buckets[m.bucketOf(key)][key]
	return v, ok
}

// all calls fn for every entry, in no particular order.
func (m *cowMap[V]) all(fn func(key string, v V)) {
	for _, b := range m.buckets {
		for k, v := range b {
			fn(k, v)
		}
	}
}

// cowEdit builds a new cowMap from an old one without changing the old.
type cowEdit[V any] struct {
	m     cowMap[V]
	owned [cowBuckets]bool
}

func newCowEdit[V any](base *cowMap[V]) *cowEdit[V] {
	return &cowEdit[V]{m: *base}
}

func (e *cowEdit[V]) bucket(key string) map[string]V {
	i := e.m.bucketOf(key)
	if !e.owned[i] {
		old := e.m.buckets[i]
		b := make(map[string]V, len(old)+1)
		for k, v := range old {
			b[k] = v
		}
		e.m.buckets[i] = b
		e.owned[i] = true
	}
	return e.m.buckets[i]
}

func (e *cowEdit[V]) set(key string, v V) {
	b := e.bucket(key)
	if _, ok := b[key]; !ok {
		e.m.len++
	}
	b[key] = v
}

func (e *cowEdit[V]) delete(key string) {
	if _, ok := e.m.get(key); !ok {
		return
	}
	delete(e.bucket(key), key)
	e.m.len--
}

func (e *cowEdit[V]) done() cowMap[V] { return e.m }
