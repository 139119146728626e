package shard

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

type kind uint8

const (
	kindService kind = iota
	kindEndpoint
	kindWorkload
)

type objKey struct {
	kind kind
	key  string
}

// Tracker is a spoke's current shard plus what the hub has not yet
// acknowledged. It is safe for concurrent use by one writer (the Builder)
// and one reader (the uplink).
//
// One update is in flight at a time: changes made meanwhile collect in the
// dirty set and leave together in the next delta, which is how bursts
// coalesce without delaying a lone change.
type Tracker struct {
	session string

	mu        sync.Mutex
	cluster   *federationpb.Cluster
	services  map[string]*federationpb.Service
	endpoints map[string]map[string]*federationpb.Endpoint // service key → endpoint key
	nEndpoint int
	workloads map[string]*federationpb.Workload
	// localities holds one of each Locality the shard's endpoints and
	// workloads point to: a cluster has a few zones and 100,000 of them
	// (only localities: they are few even over a long life, unlike nodes).
	localities *federation.Interner

	synced       bool // the source has delivered its initial state
	dirty        map[objKey]struct{}
	clusterDirty bool
	firstDirty   time.Time // when the oldest unsent change was made

	version         uint64 // last version handed out
	acked           uint64
	inflight        map[objKey]struct{} // keys of the update in flight
	inflightCluster bool
	inflightFull    bool
	inflightVer     uint64 // 0 when nothing is in flight
	needFull        bool   // the next update must be the full state

	changed chan struct{} // has a value when something is waiting to be sent
}

// NewTracker returns an empty tracker with a new random session.
func NewTracker() *Tracker {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Tracker{
		session:    hex.EncodeToString(b[:]),
		services:   map[string]*federationpb.Service{},
		endpoints:  map[string]map[string]*federationpb.Endpoint{},
		workloads:  map[string]*federationpb.Workload{},
		localities: federation.NewInterner(),
		dirty:      map[objKey]struct{}{},
		needFull:   true,
		changed:    make(chan struct{}, 1),
	}
}

// Session identifies this tracker's lifetime to the hub.
func (t *Tracker) Session() string { return t.session }

// Changed has a value when there may be something new to send.
func (t *Tracker) Changed() <-chan struct{} { return t.changed }

func (t *Tracker) signal() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// Counts returns the shard's sizes.
func (t *Tracker) Counts() (services, endpoints, workloads int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.services), t.nEndpoint, len(t.workloads)
}

// Writer changes the shard inside [Tracker.Update]. Every method compares
// with the current object and records a change only when it differs.
type Writer struct{ t *Tracker }

// Update runs fn with the tracker locked and then tells the uplink. synced
// marks the source's initial state complete: nothing is sent before.
func (t *Tracker) Update(now time.Time, synced bool, fn func(w Writer)) {
	t.mu.Lock()
	before := len(t.dirty)
	clusterBefore := t.clusterDirty
	fn(Writer{t})
	if (len(t.dirty) > before || t.clusterDirty != clusterBefore) && t.firstDirty.IsZero() {
		t.firstDirty = now
	}
	t.synced = t.synced || synced
	t.mu.Unlock()
	t.signal()
}

func (w Writer) mark(k kind, key string) { w.t.dirty[objKey{k, key}] = struct{}{} }

// SetCluster sets the cluster's own facts.
func (w Writer) SetCluster(c *federationpb.Cluster) {
	if !w.t.cluster.EqualVT(c) {
		w.t.cluster = c
		w.t.clusterDirty = true
	}
}

// Cluster returns the cluster's facts.
func (w Writer) Cluster() *federationpb.Cluster { return w.t.cluster }

// PutService adds or replaces a service.
func (w Writer) PutService(s *federationpb.Service) {
	k := federation.KeyOfService(s)
	if !w.t.services[k].EqualVT(s) {
		w.t.services[k] = s
		w.mark(kindService, k)
	}
}

// DeleteService removes a service and its endpoints.
func (w Writer) DeleteService(key string) {
	if _, ok := w.t.services[key]; ok {
		delete(w.t.services, key)
		w.mark(kindService, key)
	}
	w.SetEndpoints(key, nil)
}

// SetEndpoints replaces the endpoints of one service. The tracker owns
// eps from then on.
func (w Writer) SetEndpoints(serviceKey string, eps []*federationpb.Endpoint) {
	old := w.t.endpoints[serviceKey]
	next := make(map[string]*federationpb.Endpoint, len(eps))
	for _, e := range eps {
		e.Locality = w.t.localities.Locality(e.Locality)
		k := federation.EndpointKey(e)
		next[k] = e
		if o, ok := old[k]; ok && (o == e || o.EqualVT(e)) {
			next[k] = o
			continue
		}
		w.mark(kindEndpoint, k)
	}
	for k := range old {
		if _, ok := next[k]; !ok {
			w.mark(kindEndpoint, k)
		}
	}
	w.t.nEndpoint += len(next) - len(old)
	if len(next) == 0 {
		delete(w.t.endpoints, serviceKey)
	} else {
		w.t.endpoints[serviceKey] = next
	}
}

// PutWorkload adds or replaces a workload. The tracker owns wl from then on.
func (w Writer) PutWorkload(wl *federationpb.Workload) {
	wl.Locality = w.t.localities.Locality(wl.Locality)
	if !w.t.workloads[wl.GetUid()].EqualVT(wl) {
		w.t.workloads[wl.GetUid()] = wl
		w.mark(kindWorkload, wl.GetUid())
	}
}

// DeleteWorkload removes a workload.
func (w Writer) DeleteWorkload(uid string) {
	if _, ok := w.t.workloads[uid]; ok {
		delete(w.t.workloads, uid)
		w.mark(kindWorkload, uid)
	}
}

// Hello returns the resume facts for a new stream.
func (t *Tracker) Hello(clusterID, build string) *federationpb.Hello {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &federationpb.Hello{
		ClusterId: clusterID, Session: t.session, AckedVersion: t.acked, SentVersion: t.version, Build: build,
	}
}

// Reconnected updates the tracker after the hub's Welcome: resumed at
// version, or not (the next update is the full state).
func (t *Tracker) Reconnected(resume bool, version uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case !resume:
		t.needFull = true
	case t.inflightVer != 0 && version >= t.inflightVer:
		t.acked = version // the in-flight update arrived; its Ack did not
	case t.inflightFull:
		t.needFull = true
	case t.inflightVer != 0:
		maps.Copy(t.dirty, t.inflight) // resend what may not have arrived
		t.clusterDirty = t.clusterDirty || t.inflightCluster
		if t.firstDirty.IsZero() {
			t.firstDirty = time.Now()
		}
	}
	t.clearInflight()
	t.signal()
}

func (t *Tracker) clearInflight() {
	t.inflight, t.inflightVer, t.inflightFull, t.inflightCluster = nil, 0, false, false
}

// Next returns the next update to send and marks it in flight, or nil when
// there is nothing to send, an update is already in flight, or the source
// has not delivered its initial state.
func (t *Tracker) Next(nonce string) *federationpb.ShardUpdate {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.synced || t.inflightVer != 0 {
		return nil
	}
	if !t.needFull && len(t.dirty) == 0 && !t.clusterDirty {
		return nil
	}
	t.version++
	u := &federationpb.ShardUpdate{Version: t.version, Nonce: nonce}
	if !t.firstDirty.IsZero() {
		u.ObservedTime = timestamppb.New(t.firstDirty)
	}
	if t.needFull {
		u.Full = true
		u.Cluster = t.cluster
		u.Services = slices.Collect(maps.Values(t.services))
		u.Endpoints = make([]*federationpb.Endpoint, 0, t.nEndpoint)
		for _, m := range t.endpoints {
			for _, e := range m {
				u.Endpoints = append(u.Endpoints, e)
			}
		}
		u.Workloads = slices.Collect(maps.Values(t.workloads))
		t.inflightFull = true
	} else {
		if t.clusterDirty {
			u.Cluster = t.cluster
		}
		for k := range t.dirty {
			switch k.kind {
			case kindService:
				if s, ok := t.services[k.key]; ok {
					u.Services = append(u.Services, s)
				} else {
					u.RemovedServices = append(u.RemovedServices, k.key)
				}
			case kindEndpoint:
				if e, ok := t.endpoints[federation.EndpointServiceKey(k.key)][k.key]; ok {
					u.Endpoints = append(u.Endpoints, e)
				} else {
					u.RemovedEndpoints = append(u.RemovedEndpoints, k.key)
				}
			case kindWorkload:
				if w, ok := t.workloads[k.key]; ok {
					u.Workloads = append(u.Workloads, w)
				} else {
					u.RemovedWorkloads = append(u.RemovedWorkloads, k.key)
				}
			}
		}
	}
	t.inflight, t.inflightVer, t.inflightCluster = t.dirty, t.version, t.clusterDirty || t.needFull
	t.dirty, t.clusterDirty, t.needFull, t.firstDirty = map[objKey]struct{}{}, false, false, time.Time{}
	return u
}

// Acked records the hub's Ack of a version.
func (t *Tracker) Acked(version uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if version != t.inflightVer {
		return
	}
	t.acked = version
	t.clearInflight()
	t.signal()
}

// Nacked records the hub's Nack of a version. The hub keeps its last good
// shard; the next update is the full state, so that the hub converges as
// soon as the shard is acceptable again. It returns false for a Nack of a
// version not in flight.
func (t *Tracker) Nacked(version uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if version != t.inflightVer {
		return false
	}
	t.clearInflight()
	t.needFull = true
	return true
}

// Pending reports whether changes wait to be sent (for callers that delay
// a retry until something changed).
func (t *Tracker) Pending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty) > 0 || t.clusterDirty
}

// Versions returns the last version sent and the last one acknowledged.
func (t *Tracker) Versions() (sent, acked uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.version, t.acked
}
