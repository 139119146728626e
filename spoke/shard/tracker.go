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

// Tracker is a spoke's current shard, and for each hub replica it streams
// to (a [Stream]) what that replica has not yet acknowledged. It is safe
// for concurrent use by one writer (the Builder) and one reader per
// stream (an uplink).
//
// Each object is encoded once, when it changes, and its record is shared
// by every stream's dirty set: a spoke's cost per hub replica is the
// sending, not the encoding.
//
// The tracker keeps a hash of each object's [record], not the object: a
// cluster's shard is the spoke's largest structure, and the source's
// caches already hold what it is made of. Changed objects wait in each
// stream's dirty set as records until sent. When a replica needs the
// whole shard again (it lost the spoke's session, or rejected an update,
// or the stream is new), the tracker asks the shard's writer to write it
// anew (see [Tracker.Resync]); the other streams take from that rewrite
// only what changed.
type Tracker struct {
	session string
	seed    maphash.Seed

	mu        sync.Mutex
	cluster   *federationpb.Cluster
	cur       hashes
	nEndpoint int
	// old holds the shard's hashes during an Update that called Reset
	// (nil maps otherwise): the streams that keep sending deltas compare
	// the rewrite with it.
	old hashes
	// now is the time of the Update in progress: when the changes it
	// marks were made.
	now time.Time

	// scratch is where objects are encoded to be hashed: a record is
	// allocated only for an object that changed.
	scratch []byte

	synced  bool // the source has delivered its initial state
	streams map[*Stream]struct{}

	resync chan struct{} // has a value when the writer must write the whole shard
	// resyncAsked: a resync was asked for and no Reset has answered it.
	resyncAsked bool
}

// hashes are the shard's objects' hashes by key.
type hashes struct {
	services  map[string]uint64
	endpoints map[string]map[string]uint64 // service key → endpoint key
	workloads map[string]uint64
}

func newHashes() hashes {
	return hashes{map[string]uint64{}, map[string]map[string]uint64{}, map[string]uint64{}}
}

func (h hashes) empty() bool {
	return len(h.services) == 0 && len(h.endpoints) == 0 && len(h.workloads) == 0
}

// Stream is what one hub replica has of the tracker's shard and what it
// is still to be sent. One update is in flight at a time: changes made
// meanwhile collect in the dirty set and leave together in the next
// delta, which is how bursts coalesce without delaying a lone change.
type Stream struct {
	t *Tracker

	// dirty holds the changed objects' records; "" for a removed one.
	dirty map[objKey]record
	// complete: dirty holds every object, as after a Reset (and at first).
	complete bool
	// collecting: the Update in progress called Reset, and this stream
	// takes every object written, changed or not.
	collecting   bool
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
}

var _ syncproto.Shard = (*Stream)(nil)

// NewTracker returns an empty tracker with a new random session and no
// streams.
func NewTracker() *Tracker {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Tracker{
		session: hex.EncodeToString(b[:]),
		seed:    maphash.MakeSeed(),
		cur:     newHashes(),
		streams: map[*Stream]struct{}{},
		resync:  make(chan struct{}, 1),
	}
}

// Open returns a new stream of the shard, for one hub replica. Its first
// update is the full state: a stream opened before anything was written
// collects it as it is written; a later one has the writer write the
// shard anew. Close it when the replica is gone.
func (t *Tracker) Open() *Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &Stream{
		t:        t,
		dirty:    map[objKey]record{},
		complete: t.cur.empty(),
		needFull: true,
		changed:  make(chan struct{}, 1),
	}
	t.streams[s] = struct{}{}
	s.signal()
	return s
}

// Close forgets the stream: the tracker no longer collects its changes.
func (s *Stream) Close() {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	delete(s.t.streams, s)
	s.dirty, s.inflight = nil, nil
}

// Resync has a value when a stream needs the whole shard and the tracker
// does not hold it (it keeps hashes, not objects): the shard's writer then
// writes it anew, in one [Tracker.Update] that calls [Writer.Reset] first.
// Until then no full state leaves; a tracker whose writer never resyncs
// sends no full state after its first.
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
func (s *Stream) Changed() <-chan struct{} { return s.changed }

func (s *Stream) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Counts returns the shard's sizes.
func (t *Tracker) Counts() (services, endpoints, workloads int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cur.services), t.nEndpoint, len(t.cur.workloads)
}

// Writer changes the shard inside [Tracker.Update]. Every method compares
// with the current object and records a change only when it differs.
type Writer struct{ t *Tracker }

// Update runs fn with the tracker locked and then tells the streams.
// synced marks the source's initial state complete: nothing is sent
// before.
func (t *Tracker) Update(now time.Time, synced bool, fn func(w Writer)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = now
	fn(Writer{t})
	if t.resetting() {
		t.endReset()
	}
	t.synced = t.synced || synced
	for s := range t.streams {
		s.signal()
	}
}

func (t *Tracker) resetting() bool { return t.old.services != nil }

// mark records the change of k, with r its record ("" for a removal), in
// every stream that takes it.
func (t *Tracker) mark(k objKey, r record, changed bool) {
	for s := range t.streams {
		if changed || (s.collecting && r != "") {
			s.dirty[k] = r
			s.touched(t.now)
		}
	}
}

// touched notes that a change waits to be sent since now, unless an
// older one does.
func (s *Stream) touched(now time.Time) {
	if s.firstDirty.IsZero() {
		s.firstDirty = now
	}
}

// diff encodes m, the object k, as an element of field and returns its
// hash; unless prev (its hash so far, when had) is the same, it marks k
// dirty with the record. The record is allocated once for every stream.
func (w Writer) diff(k objKey, field protowire.Number, m proto.Message, prev uint64, had bool) (uint64, error) {
	t := w.t
	b, err := appendRecord(t.scratch[:0], field, m)
	t.scratch = b[:0]
	if err != nil {
		return 0, err
	}
	h := maphash.Bytes(t.seed, b)
	if changed := !had || h != prev; changed || t.resetting() {
		t.mark(k, record(b), changed) // one allocation, every stream's
	}
	return h, nil
}

// Reset forgets the shard (not the cluster's facts): what is written in
// the rest of this Update is the whole shard, and leaves as the full
// state to the streams that need it. The other streams get what the
// rewrite changed, removals included.
func (w Writer) Reset() {
	t := w.t
	if !t.resetting() {
		t.old = t.cur
	}
	t.cur, t.nEndpoint = newHashes(), 0
	for s := range t.streams {
		if s.needFull {
			s.dirty, s.complete, s.collecting = map[objKey]record{}, true, true
		}
	}
	t.resyncAsked = false
	select {
	case <-t.resync: // answered
	default:
	}
}

// endReset ends an Update that called Reset: what the rewrite did not
// write is gone.
func (t *Tracker) endReset() {
	for k := range t.old.services {
		if _, ok := t.cur.services[k]; !ok {
			t.mark(objKey{kindService, k}, "", true)
		}
	}
	// SetEndpoints took from old every service the rewrite wrote.
	for _, eps := range t.old.endpoints {
		for k := range eps {
			t.mark(objKey{kindEndpoint, k}, "", true)
		}
	}
	for k := range t.old.workloads {
		if _, ok := t.cur.workloads[k]; !ok {
			t.mark(objKey{kindWorkload, k}, "", true)
		}
	}
	t.old = hashes{}
	for s := range t.streams {
		s.collecting = false
	}
}

// lookup returns the hash of key in m, or during a Reset in old, which
// the rewrite has not yet replaced.
func lookup(m, old map[string]uint64, key string) (uint64, bool) {
	if h, ok := m[key]; ok {
		return h, true
	}
	h, ok := old[key]
	return h, ok
}

// SetCluster sets the cluster's own facts.
func (w Writer) SetCluster(c *federationpb.Cluster) {
	if !w.t.cluster.EqualVT(c) {
		w.t.cluster = c
		for s := range w.t.streams {
			s.clusterDirty = true
			s.touched(w.t.now)
		}
	}
}

// Cluster returns the cluster's facts.
func (w Writer) Cluster() *federationpb.Cluster { return w.t.cluster }

// PutService adds or replaces a service. It returns an error when the
// service cannot be encoded, and the shard keeps the version it had, if
// any: a bad version must not withdraw a good one.
func (w Writer) PutService(s *federationpb.Service) error {
	k := federation.KeyOfService(s)
	prev, had := lookup(w.t.cur.services, w.t.old.services, k)
	h, err := w.diff(objKey{kindService, k}, fieldServices, s, prev, had)
	if err != nil {
		if had {
			w.t.cur.services[k] = prev
		}
		return fmt.Errorf("service %s: %w", k, err)
	}
	w.t.cur.services[k] = h
	return nil
}

// DeleteService removes a service and its endpoints.
func (w Writer) DeleteService(key string) {
	if _, ok := lookup(w.t.cur.services, w.t.old.services, key); ok {
		delete(w.t.cur.services, key)
		delete(w.t.old.services, key)
		w.t.mark(objKey{kindService, key}, "", true)
	}
	w.SetEndpoints(key, nil) //nolint:errcheck // no endpoints, no errors
}

// SetEndpoints replaces the endpoints of one service. Endpoints that
// cannot be encoded are returned as an error, and the shard keeps the
// versions it had of them, if any.
func (w Writer) SetEndpoints(serviceKey string, eps []*federationpb.Endpoint) error {
	cur, ok := w.t.cur.endpoints[serviceKey]
	base := cur
	if !ok && w.t.resetting() {
		base = w.t.old.endpoints[serviceKey]
		delete(w.t.old.endpoints, serviceKey) // decided here, not at the end of the Reset
	}
	next := make(map[string]uint64, len(eps))
	var errs []error
	for _, e := range eps {
		k := federation.EndpointKey(e)
		prev, had := base[k]
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
	for k := range base {
		if _, ok := next[k]; !ok {
			w.t.mark(objKey{kindEndpoint, k}, "", true)
		}
	}
	w.t.nEndpoint += len(next) - len(cur)
	if len(next) == 0 {
		delete(w.t.cur.endpoints, serviceKey)
	} else {
		w.t.cur.endpoints[serviceKey] = next
	}
	return errors.Join(errs...)
}

// PutWorkload adds or replaces a workload. It returns an error when the
// workload cannot be encoded, and the shard keeps the version it had, if
// any.
func (w Writer) PutWorkload(wl *federationpb.Workload) error {
	k := federation.KeyOfWorkload(wl)
	prev, had := lookup(w.t.cur.workloads, w.t.old.workloads, k)
	h, err := w.diff(objKey{kindWorkload, k}, fieldWorkloads, wl, prev, had)
	if err != nil {
		if had {
			w.t.cur.workloads[k] = prev
		}
		return fmt.Errorf("workload %s: %w", k, err)
	}
	w.t.cur.workloads[k] = h
	return nil
}

// DeleteWorkload removes a workload.
func (w Writer) DeleteWorkload(uid string) {
	if _, ok := lookup(w.t.cur.workloads, w.t.old.workloads, uid); ok {
		delete(w.t.cur.workloads, uid)
		delete(w.t.old.workloads, uid)
		w.t.mark(objKey{kindWorkload, uid}, "", true)
	}
}

// Hello returns the resume facts for a new stream.
func (s *Stream) Hello(clusterID, build string) *federationpb.Hello {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return &federationpb.Hello{
		ClusterId: clusterID, Session: s.t.session, AckedVersion: s.acked, SentVersion: s.version, Build: build,
	}
}

// Reconnected updates the stream after the hub's Welcome: resumed at
// version, or not (the next update is the full state).
func (s *Stream) Reconnected(resume bool, version uint64) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	switch {
	case !resume:
		s.needFull = true
	case s.inflightVer != 0 && version >= s.inflightVer:
		s.acked = version // the in-flight update arrived; its Ack did not
	case s.inflightFull:
		s.needFull = true
	case s.inflightVer != 0:
		// Resend what may not have arrived, unless it changed since.
		for k, r := range s.inflight {
			if _, ok := s.dirty[k]; !ok {
				s.dirty[k] = r
			}
		}
		s.clusterDirty = s.clusterDirty || s.inflightCluster
		if s.firstDirty.IsZero() {
			s.firstDirty = time.Now()
		}
	}
	s.clearInflight()
	s.signal()
}

func (s *Stream) clearInflight() {
	s.inflight, s.inflightVer, s.inflightFull, s.inflightCluster = nil, 0, false, false
}

// Next returns the next update to send, in chunks whose encodings stay
// under maxBytes (no limit for maxBytes <= 0), and marks it in flight. It
// returns nil when there is nothing to send, an update is already in
// flight, the source has not delivered its initial state, or the full
// state is due and the writer has yet to write it (see [Tracker.Resync]).
func (s *Stream) Next(nonce string, maxBytes int) syncproto.Update {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.synced || s.inflightVer != 0 || s.dirty == nil {
		return nil
	}
	if s.needFull && !s.complete {
		if !t.resyncAsked {
			t.resyncAsked = true
			select {
			case t.resync <- struct{}{}:
			default:
			}
		}
		return nil
	}
	if !s.needFull && len(s.dirty) == 0 && !s.clusterDirty {
		return nil
	}
	s.version++
	first := &federationpb.ShardUpdate{Version: s.version, Nonce: nonce, Full: s.needFull}
	if !s.firstDirty.IsZero() {
		first.ObservedTime = timestamppb.New(s.firstDirty)
	}
	if s.needFull || s.clusterDirty {
		first.Cluster = t.cluster
	}
	c := newChunker(first, maxBytes)
	for k, r := range s.dirty {
		switch {
		case r != "":
			c.add(r)
		case s.needFull: // a full state lists only what is
		case k.kind == kindService:
			c.add(removal(fieldRemovedServices, k.key))
		case k.kind == kindEndpoint:
			c.add(removal(fieldRemovedEndpoints, k.key))
		case k.kind == kindWorkload:
			c.add(removal(fieldRemovedWorkloads, k.key))
		}
	}
	if s.needFull {
		s.inflight, s.inflightFull = nil, true // resending it takes a resync
	} else {
		s.inflight = s.dirty
	}
	s.inflightVer, s.inflightCluster = s.version, s.clusterDirty || s.needFull
	s.dirty, s.complete, s.clusterDirty, s.needFull, s.firstDirty = map[objKey]record{}, false, false, false, time.Time{}
	return c.done()
}

// Acked records the hub's Ack of a version, and reports whether it
// acknowledged a full state.
func (s *Stream) Acked(version uint64) (full bool) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if version != s.inflightVer {
		return false
	}
	full = s.inflightFull
	s.acked = version
	s.clearInflight()
	s.signal()
	return full
}

// Nacked records the hub's Nack of a version. The hub keeps its last good
// shard; the next update is the full state, so that the hub converges as
// soon as the shard is acceptable again. It returns false for a Nack of a
// version not in flight.
func (s *Stream) Nacked(version uint64) bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if version != s.inflightVer {
		return false
	}
	s.clearInflight()
	s.needFull = true
	return true
}

// Pending reports whether changes wait to be sent (for callers that delay
// a retry until something changed).
func (s *Stream) Pending() bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return len(s.dirty) > 0 || s.clusterDirty
}
