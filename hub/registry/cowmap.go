package registry

// cowBuckets trades copy cost per snapshot (the bucket array) against copy
// cost per changed key (one bucket).
const cowBuckets = 256

// cowMap is a string-keyed map whose copies share storage: copying costs
// one array of bucket pointers, and a change clones only the bucket it
// touches. Snapshots use it so that publishing a change to one of 100,000
// workloads does not copy the other 99,999. A cowMap value that has been
// published is never written again; writers go through a cowEdit.
type cowMap[V any] struct {
	buckets [cowBuckets]map[string]V
	len     int
}

func bucketOf(key string) int {
	// FNV-1a: cheap, stable, good enough to spread keys.
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % cowBuckets)
}

func (m *cowMap[V]) get(key string) (V, bool) {
	v, ok := m.buckets[bucketOf(key)][key]
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
	i := bucketOf(key)
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
