package registry

// serviceBuckets is how many buckets the clusterset's services are
// split into: it trades copy cost per snapshot (the bucket slice) against
// copy cost per changed service (one bucket).
const serviceBuckets = 256

// cowMap is a string-keyed map whose copies share storage: copying costs
// one slice of bucket pointers, and a change clones only the bucket it
// touches. Snapshots use it so that publishing a change to one of 100,000
// workloads does not copy the other 99,999. A cowMap value that has been
// published is never written again; writers go through a cowEdit. The
// zero cowMap is empty and cannot be edited: make one with newCowMap.
type cowMap[V any] struct {
	buckets []map[string]V
	len     int
}

func newCowMap[V any](buckets int) cowMap[V] {
	return cowMap[V]{buckets: make([]map[string]V, buckets)}
}

func (m *cowMap[V]) bucketOf(key string) int { return int(fnv1a(key) % uint32(len(m.buckets))) }

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
	if len(m.buckets) == 0 {
		var zero V
		return zero, false
	}
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
	owned []bool
}

func newCowEdit[V any](base *cowMap[V]) *cowEdit[V] {
	m := *base
	m.buckets = append([]map[string]V(nil), base.buckets...)
	return &cowEdit[V]{m: m, owned: make([]bool, len(m.buckets))}
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
