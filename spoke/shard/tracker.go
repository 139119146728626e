package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
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
//
// The tracker keeps a hash of each object's [record], not the object: a
// cluster's shard is the spoke's largest structure, and the source's
// caches already hold what it is made of. Changed objects wait in the
// dirty set as records until sent. When the hub needs the whole shard
// again (it lost the spoke's session, or rejected an update), the tracker
// asks the shard's writer to write it anew (see [Tracker.Resync]).
type Tracker struct {
	session string
	seed    maphash.Seed

	mu        sync.Mutex
	cluster   *federationpb.Cluster
	services  map[string]uint64
	endpoints map[string]map[string]uint64 // service key → endpoint key
	nEndpoint int
	workloads map[string]uint64

	// scratch is where objects are encoded to be hashed: a record is
	// allocated only for an object that changed.
	scratch []byte

	synced bool // the source has delivered its initial state
	// dirty holds the changed objects' records; "" for a removed one.
	dirty map[objKey]record
	// complete: dirty holds every object, as after a Reset (and at first).
	complete     bool
	clusterDirty bool
	firstDirty   time.Time // when the oldest unsent change was made

	version         uint64 // last version handed out
	acked           uint64
	inflight        map[objKey]record // the delta in flight
	inflightCluster bool
	inflightFull    bool
	inflightVer     uint64 // 0 when nothing is in flight
	needFull        bool   // the next update must be the full state

	changed chan struct{} // has a value when something is waiting to be sent
	resync  chan struct{} // has a value when the writer must write the whole shard
	// resyncAsked: a resync was asked for and no Reset has answered it.
	resyncAsked bool
}

var _ syncproto.Shard = (*Tracker)(nil)

// NewTracker returns an empty tracker with a new random session.
func NewTracker() *Tracker {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Tracker{
		session:   hex.EncodeToString(b[:]),
		seed:      maphash.MakeSeed(),
		services:  map[string]uint64{},
		endpoints: map[string]map[string]uint64{},
		workloads: map[string]uint64{},
		dirty:     map[objKey]record{},
		complete:  true,
		needFull:  true,
		changed:   make(chan struct{}, 1),
		resync:    make(chan struct{}, 1),
	}
}

// Resync has a value when the hub needs the whole shard and the tracker
// does not hold it (it keeps hashes, not objects): the shard's writer then
// writes it anew, in one [Tracker.Update] that calls [Writer.Reset] first.
// Until then no update leaves; a tracker whose writer never resyncs sends
// no full state after its first.
func (t *Tracker) Resync() <-chan struct{} { return t.resync }

// AnswerResyncs calls write each time the tracker asks for the whole shard
// ([Tracker.Resync]), until ctx ends. write runs on the caller's goroutine,
// so the shard's writer orders it against its other writes with its own
// lock; it writes the shard in one [Tracker.Update] that calls
// [Writer.Reset] first.
func (t *Tracker) AnswerResyncs(ctx context.Context, write func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.resync:
			write()
		}
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

// diff encodes m, the object k, as an element of field and returns its
// hash; unless prev (its hash so far, when had) is the same, it marks k
// dirty with the record.
func (w Writer) diff(k objKey, field protowire.Number, m proto.Message, prev uint64, had bool) (uint64, error) {
	b, err := appendRecord(w.t.scratch[:0], field, m)
	w.t.scratch = b[:0]
	if err != nil {
		return 0, err
	}
	h := maphash.Bytes(w.t.seed, b)
	if !had || h != prev {
		w.t.dirty[k] = record(b)
	}
	return h, nil
}

// Reset forgets the shard (not the cluster's facts): what is written next
// is the whole shard, and it leaves as the full state (a delta would lose
// the removals Reset forgets).
func (w Writer) Reset() {
	t := w.t
	t.services, t.endpoints, t.workloads, t.nEndpoint = map[string]uint64{}, map[string]map[string]uint64{}, map[string]uint64{}, 0
	t.dirty, t.complete, t.needFull, t.resyncAsked = map[objKey]record{}, true, true, false
	select {
	case <-t.resync: // answered
	default:
	}
}

// SetCluster sets the cluster's own facts.
func (w Writer) SetCluster(c *federationpb.Cluster) {
	if !w.t.cluster.EqualVT(c) {
		w.t.cluster = c
		w.t.clusterDirty = true
	}
}

// Cluster returns the cluster's facts.
func (w Writer) Cluster() *federationpb.Cluster { return w.t.cluster }

// PutService adds or replaces a service. It returns an error when the
// service cannot be encoded, and the shard keeps the version it had, if
// any: a bad version must not withdraw a good one.
func (w Writer) PutService(s *federationpb.Service) error {
	k := federation.KeyOfService(s)
	prev, had := w.t.services[k]
	h, err := w.diff(objKey{kindService, k}, fieldServices, s, prev, had)
	if err != nil {
		return fmt.Errorf("service %s: %w", k, err)
	}
	w.t.services[k] = h
	return nil
}

// DeleteService removes a service and its endpoints.
func (w Writer) DeleteService(key string) {
	if _, ok := w.t.services[key]; ok {
		delete(w.t.services, key)
		w.t.dirty[objKey{kindService, key}] = ""
	}
	w.SetEndpoints(key, nil) //nolint:errcheck // no endpoints, no errors
}

// SetEndpoints replaces the endpoints of one service. Endpoints that
// cannot be encoded are returned as an error, and the shard keeps the
// versions it had of them, if any.
func (w Writer) SetEndpoints(serviceKey string, eps []*federationpb.Endpoint) error {
	old := w.t.endpoints[serviceKey]
	next := make(map[string]uint64, len(eps))
	var errs []error
	for _, e := range eps {
		k := federation.EndpointKey(e)
		prev, had := old[k]
		h, err := w.diff(objKey{kindEndpoint, k}, fieldEndpoints, e, prev, had)
		if err != nil {
			errs = append(errs, fmt.Errorf("endpoint %s: %w", k, err))
			if had {
				next[k] = prev
			}
			continue
		}
		next[k] = h
	}
	for k := range old {
		if _, ok := next[k]; !ok {
			w.t.dirty[objKey{kindEndpoint, k}] = ""
		}
	}
	w.t.nEndpoint += len(next) - len(old)
	if len(next) == 0 {
		delete(w.t.endpoints, serviceKey)
	} else {
		w.t.endpoints[serviceKey] = next
	}
	return errors.Join(errs...)
}

// PutWorkload adds or replaces a workload. It returns an error when the
// workload cannot be encoded, and the shard keeps the version it had, if
// any.
func (w Writer) PutWorkload(wl *federationpb.Workload) error {
	k := federation.KeyOfWorkload(wl)
	prev, had := w.t.workloads[k]
	h, err := w.diff(objKey{kindWorkload, k}, fieldWorkloads, wl, prev, had)
	if err != nil {
		return fmt.Errorf("workload %s: %w", k, err)
	}
	w.t.workloads[k] = h
	return nil
}

// DeleteWorkload removes a workload.
func (w Writer) DeleteWorkload(uid string) {
	if _, ok := w.t.workloads[uid]; ok {
		delete(w.t.workloads, uid)
		w.t.dirty[objKey{kindWorkload, uid}] = ""
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
		// Resend what may not have arrived, unless it changed since.
		for k, r := range t.inflight {
			if _, ok := t.dirty[k]; !ok {
				t.dirty[k] = r
			}
		}
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

// Next returns the next update to send, in chunks whose encodings stay
// under maxBytes (no limit for maxBytes <= 0), and marks it in flight. It
// returns nil when there is nothing to send, an update is already in
// flight, the source has not delivered its initial state, or the full
// state is due and the writer has yet to write it (see [Tracker.Resync]).
func (t *Tracker) Next(nonce string, maxBytes int) syncproto.Update {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.synced || t.inflightVer != 0 {
		return nil
	}
	if t.needFull && !t.complete {
		if !t.resyncAsked {
			t.resyncAsked = true
			select {
			case t.resync <- struct{}{}:
			default:
			}
		}
		return nil
	}
	if !t.needFull && len(t.dirty) == 0 && !t.clusterDirty {
		return nil
	}
	t.version++
	first := &federationpb.ShardUpdate{Version: t.version, Nonce: nonce, Full: t.needFull}
	if !t.firstDirty.IsZero() {
		first.ObservedTime = timestamppb.New(t.firstDirty)
	}
	if t.needFull || t.clusterDirty {
		first.Cluster = t.cluster
	}
	c := newChunker(first, maxBytes)
	for k, r := range t.dirty {
		switch {
		case r != "":
			c.add(r)
		case t.needFull: // a full state lists only what is
		case k.kind == kindService:
			c.add(removal(fieldRemovedServices, k.key))
		case k.kind == kindEndpoint:
			c.add(removal(fieldRemovedEndpoints, k.key))
		case k.kind == kindWorkload:
			c.add(removal(fieldRemovedWorkloads, k.key))
		}
	}
	if t.needFull {
		t.inflight, t.inflightFull = nil, true // resending it takes a resync
	} else {
		t.inflight = t.dirty
	}
	t.inflightVer, t.inflightCluster = t.version, t.clusterDirty || t.needFull
	t.dirty, t.complete, t.clusterDirty, t.needFull, t.firstDirty = map[objKey]record{}, false, false, false, time.Time{}
	return c.done()
}

// Acked records the hub's Ack of a version, and reports whether it
// acknowledged a full state.
func (t *Tracker) Acked(version uint64) (full bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if version != t.inflightVer {
		return false
	}
	full = t.inflightFull
	t.acked = version
	t.clearInflight()
	t.signal()
	return full
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
