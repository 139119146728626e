package xds

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/grpccodec"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/translate"
)

// entry is one resource, encoded once; several sets may share it.
type entry = translate.Resource

// set is the resources of one type for one view ("" for resources every
// proxy shares).
type set struct {
	// version is the state-of-the-world version of the whole set: sum in
	// hex, so that every hub replica names equal sets alike and a proxy
	// moving between replicas never takes a different set for the one it
	// has (or an equal one for a change).
	version string
	// sum is the XOR of a hash of each entry's name and version, kept
	// as entries change.
	sum     uint64
	entries entries
	// rev counts the set's changes, and recent holds the names the latest
	// ones changed (oldest first), so that a wildcard delta client in sync
	// at an earlier revision is compared on those names only.
	rev    uint64
	recent []setChange
	// sorted is entries by name, built when a full comparison needs it
	// and dropped on change: every ztunnel that connects to a set of one
	// revision gets the same first response (100,000 addresses sorted once,
	// not once per ztunnel).
	sorted []*entry
	// full is the encoded first response of a wildcard delta client at
	// revision fullRev: built once per revision, whatever the number of
	// ztunnels that connect, and held weakly: its megabytes stay only
	// while streams still send it.
	full    weak.Pointer[encodedResponse]
	fullRev uint64

	// What a wildcard delta client synced at a revision lacks is what
	// changed after it: revs is the revision each entry last changed at,
	// and removed the revision each name left the set at, for the latest
	// removals (tombstones, in order). A client synced before floor
	// cannot be compared: removals it missed were forgotten. The set
	// holds this once, so that a client costs its stream a revision, not
	// a copy of the versions of everything it holds.
	revs       map[string]uint64
	removed    map[string]uint64
	tombstones []tombstone
	floor      uint64
}

// tombstone is a name removed from a set at a revision.
type tombstone struct {
	name string
	rev  uint64
}

// minTombstones is the fewest removals a set remembers; it remembers as
// many as it has entries beyond that.
const minTombstones = 1024

func newSet(table *nameTable) *set { return &set{entries: newEntries(table)} }

// track starts keeping revisions and removals, for the set's first
// wildcard delta client: sets that only clients by name read (EDS, one
// per locality) keep none. What came before counts as changed now, and
// no client synced earlier exists.
func (s *set) track() {
	if s.revs != nil {
		return
	}
	s.revs, s.removed, s.floor = make(map[string]uint64, s.entries.len()), map[string]uint64{}, s.rev
	for e := range s.entries.all {
		s.revs[e.Name] = s.rev
	}
}

// put records an entry changed (or added) by the revision being made.
func (s *set) put(e *entry) {
	s.entries.put(e)
	if s.revs != nil {
		s.revs[e.Name] = s.rev + 1
		delete(s.removed, e.Name)
	}
}

// remove records a name removed by the revision being made, and forgets
// the oldest removals beyond what the set remembers.
func (s *set) remove(name string) {
	s.entries.remove(name)
	if s.revs == nil {
		return
	}
	delete(s.revs, name)
	s.removed[name] = s.rev + 1
	s.tombstones = append(s.tombstones, tombstone{name, s.rev + 1})
	for len(s.tombstones) > max(minTombstones, s.entries.len()) {
		t := s.tombstones[0]
		s.tombstones[0] = tombstone{}
		s.tombstones = s.tombstones[1:]
		if s.removed[t.name] == t.rev {
			delete(s.removed, t.name)
		}
		s.floor = t.rev
	}
}

// setChange is the names one revision of a set changed, the set's version
// after it, and when a spoke observed the change it carries (zero: not a
// spoke's change), so that a proxy's ACK of a version can be timed.
type setChange struct {
	rev   uint64
	names []string
	// every marks the revision that made the set: it changed every name
	// the set then held, which are not listed (a view's first build holds
	// ten thousand names, and a thousand views would keep them all until
	// their logs move on).
	every    bool
	version  string
	observed time.Time
}

// touches reports whether the change may concern a proxy, given whether a
// list of names does.
func (c setChange) touches(names func([]string) bool) bool { return c.every || names(c.names) }

// maxRecent bounds a set's change log; a client further behind is
// compared in full.
const maxRecent = 64

// changed records a revision that changed names, or every name (the
// set's first, whose names are not listed), and gave the set version,
// carrying a change observed at observed.
func (s *set) changed(names []string, every bool, version string, observed time.Time) {
	s.rev++
	s.sorted, s.full = nil, weak.Pointer[encodedResponse]{}
	s.version = version
	if len(s.recent) == maxRecent {
		// Forget the oldest by sliding the log along its array, which
		// append moves once the log reaches the array's end: one copy
		// per maxRecent changes, not one per change (a push changes one
		// set per view: with a thousand views, a copy of the whole log
		// each was 9% of the hub's CPU).
		s.recent[0] = setChange{}
		s.recent = s.recent[1:]
	}
	s.recent = append(s.recent, setChange{rev: s.rev, names: names, every: every, version: version, observed: observed})
}

// acked returns the revision of the set that a proxy holding version has
// (the newest with that version), and the observed times of the changes
// it got since revision from that touch it (touches, given a revision's
// changed names). ok is false when the version is not among the set's
// recent revisions.
func (s *set) acked(from uint64, version string, touches func(names []string) bool) (rev uint64, observed []time.Time, ok bool) {
	i := len(s.recent) - 1
	for ; i >= 0 && s.recent[i].version != version; i-- {
	}
	if i < 0 {
		return 0, nil, false
	}
	rev = s.recent[i].rev
	for _, c := range s.recent[:i+1] {
		if c.rev > from && !c.observed.IsZero() && c.touches(touches) {
			observed = append(observed, c.observed)
		}
	}
	return rev, observed, true
}

// byName returns the set's entries sorted by name.
func (s *set) byName() []*entry {
	if s.sorted == nil {
		s.sorted = slices.SortedFunc(s.entries.all, compareNames)
	}
	return s.sorted
}

func compareNames(a, b *entry) int { return strings.Compare(a.Name, b.Name) }

// changedSince returns the names changed after revision rev, without
// duplicates, and whether the log reaches back that far.
func (s *set) changedSince(rev uint64) ([]string, bool) {
	if len(s.recent) == 0 || s.recent[0].rev > rev+1 {
		return nil, false
	}
	if last := s.recent[len(s.recent)-1]; last.rev == rev+1 && !last.every {
		return last.names, true // one revision: its names have no duplicates
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range s.recent {
		if c.rev <= rev {
			continue
		}
		if c.every {
			return nil, false
		}
		for _, n := range c.names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out, true
}

type setKey struct {
	typeURL string
	view    string
}

// sotwWatch is a state-of-the-world stream's open request for one type.
type sotwWatch struct {
	typeURL string
	// first is set for the type's first request on its stream, which is
	// answered even when the proxy would get nothing.
	first bool
	sub   *sotwSubscription
	ch    chan<- *response
}

// deltaWatch is a delta stream's open request for one type.
type deltaWatch struct {
	typeURL string
	// first is set for the type's first request on its stream, which a
	// wildcard subscription gets an answer to even when it has everything.
	first bool
	sub   *subscription
	ch    chan<- *deltaResp
}

// Cache holds encoded resources and the proxies' open watches: the
// server's stream handlers watch it through watchSotw and watchDelta.
type Cache struct {
	mu    sync.Mutex
	sets  map[setKey]*set
	names map[string]*nameTable // by type URL, of the types whose sets share names
	sotw  map[setKey]*watchers[*sotwWatch]
	delta map[setKey]*watchers[*deltaWatch]
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{
		sets:  map[setKey]*set{},
		names: map[string]*nameTable{},
		sotw:  map[setKey]*watchers[*sotwWatch]{},
		delta: map[setKey]*watchers[*deltaWatch]{},
	}
}

// Apply puts encoded resources in a set (sharing them with any other set
// that has them), drops removals, and answers the watches of the set that
// now differ; or it forgets a dropped view's set. It reports whether the
// set changed.
func (c *Cache) Apply(u translate.SetUpdate) bool { return c.ApplyObserved(u, time.Time{}) }

// ApplyObserved is Apply for an update that carries a change a spoke
// observed at observed (in the hub's clock): the proxies' ACKs of it are
// timed from then.
func (c *Cache) ApplyObserved(u translate.SetUpdate, observed time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := setKey{u.TypeURL, u.View}
	if u.Drop {
		s, ok := c.sets[k]
		if ok {
			s.entries.release()
		}
		delete(c.sets, k)
		// A view is dropped once no proxy uses it: its watch indexes are
		// empty, and would otherwise stay for every view ever used.
		if ws := c.sotw[k]; ws != nil && ws.empty() {
			delete(c.sotw, k)
		}
		if ws := c.delta[k]; ws != nil && ws.empty() {
			delete(c.delta, k)
		}
		return ok
	}
	upserts, removals := u.Upserts, u.Removals
	s := c.sets[k]
	created := s == nil
	if created {
		var table *nameTable
		if sharesNames(u.TypeURL) {
			if table = c.names[u.TypeURL]; table == nil {
				table = newNameTable()
				c.names[u.TypeURL] = table
			}
		}
		s = newSet(table)
		c.sets[k] = s
	}
	// A new set's first revision changes every name it holds, which the
	// log does not list (see setChange.every) and the watches need not
	// be told one by one: they are all answered.
	var changed []string
	for _, e := range upserts {
		old, ok := s.entries.get(e.Name)
		if ok && old.Version == e.Version {
			continue
		}
		if ok {
			s.sum ^= old.Sum
		}
		s.sum ^= e.Sum
		s.put(e)
		if !created {
			changed = append(changed, e.Name)
		}
	}
	for _, name := range removals {
		if old, ok := s.entries.get(name); ok {
			s.sum ^= old.Sum
			s.remove(name)
			changed = append(changed, name)
		}
	}
	if len(changed) == 0 && !created {
		return false
	}
	s.changed(changed, created, strconv.FormatUint(s.sum, 16), observed)
	// A new set answers every watch that waited for it to be built.
	c.notifyLocked(k, s, changed, created)
	return true
}

// Acked returns the revision of the set of typeURL and view that a proxy
// holding version has, and the observed times of the changes it got since
// revision from that touch it; ok is false when the version is unknown
// (older than the set's recent revisions, or of no revision).
func (c *Cache) Acked(typeURL, view string, from uint64, version string, touches func(names []string) bool) (rev uint64, observed []time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[setKey{typeURL, view}]
	if s == nil {
		return 0, nil, false
	}
	return s.acked(from, version, touches)
}

// Behind returns, for a proxy that holds revision rev of a set, whether a
// later revision changed what it watches (touches), and when the oldest
// such change was observed (zero when not a spoke's).
func (c *Cache) Behind(typeURL, view string, rev uint64, touches func(names []string) bool) (behind bool, since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[setKey{typeURL, view}]
	if s == nil || s.rev <= rev {
		return false, time.Time{}
	}
	for _, ch := range s.recent {
		if ch.rev > rev && ch.touches(touches) {
			return true, ch.observed
		}
	}
	// Changes older than the log: behind, since an unknown time.
	return len(s.recent) == 0 || s.recent[0].rev > rev+1, time.Time{}
}

// SetStatus describes one set of the cache.
type SetStatus struct {
	Type      string `json:"type"`
	View      string `json:"view,omitempty"`
	Version   string `json:"version"`
	Resources int    `json:"resources"`
}

// Sets describes every set, sorted by type and view.
func (c *Cache) Sets() []SetStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SetStatus, 0, len(c.sets))
	for k, s := range c.sets {
		out = append(out, SetStatus{Type: k.typeURL, View: k.view, Version: s.version, Resources: s.entries.len()})
	}
	slices.SortFunc(out, func(a, b SetStatus) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.View, b.View)) })
	return out
}

// Resources returns the versions of a set's resources by name; nil when
// there is no such set.
func (c *Cache) Resources(typeURL, view string) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[setKey{typeURL, view}]
	if s == nil {
		return nil
	}
	out := make(map[string]string, s.entries.len())
	for e := range s.entries.all {
		out[e.Name] = e.Version
	}
	return out
}

func (c *Cache) notifyLocked(k setKey, s *set, changed []string, all bool) {
	if ws := c.sotw[k]; ws != nil {
		for _, w := range ws.affected(changed, all) {
			if resp := sotwResponse(w, s, false); resp != nil {
				ws.remove(w)
				w.ch <- resp // never blocks: one response per watch, buffered per type
			}
		}
	}
	if ws := c.delta[k]; ws != nil {
		for _, w := range ws.affected(changed, all) {
			if resp := deltaResponse(w, s, false); resp != nil {
				ws.remove(w)
				w.ch <- resp // never blocks: one response per watch, buffered per type
			}
		}
	}
}

// watchSotw answers a state-of-the-world request for the set view of its
// type at once when the proxy lacks something (or for the type's first
// request), or parks the watch until the set changes. It returns the
// watch's cancel function.
func (c *Cache) watchSotw(view string, w *sotwWatch) func() {
	k := setKey{w.typeURL, view}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sets[k]; s != nil {
		if resp := sotwResponse(w, s, w.first); resp != nil {
			w.ch <- resp
			return func() {}
		}
	}
	return park(c, c.sotw, k, w, w.sub.wildcard, w.sub.names)
}

// watchDelta answers a delta request for the set view of its type at once
// when the proxy lacks something, or parks the watch until the set
// changes. It returns the watch's cancel function.
func (c *Cache) watchDelta(view string, w *deltaWatch) func() {
	k := setKey{w.typeURL, view}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A wildcard client is answered at once, even with nothing, once its
	// set exists. Until then (a view being built) it waits: an empty answer
	// would tell a reconnecting client that everything it has is gone.
	if s := c.sets[k]; s != nil {
		if resp := s.deltaAnswer(w); resp != nil {
			w.ch <- resp
			return func() {}
		}
	}
	return park(c, c.delta, k, w, w.sub.wildcard, w.sub.names)
}

// park registers a watch that waits for a change and returns its cancel
// function. Callers hold c.mu.
func park[W comparable](c *Cache, index map[setKey]*watchers[W], k setKey, w W, wildcard bool, names map[string]struct{}) func() {
	ws := index[k]
	if ws == nil {
		ws = newWatchers[W]()
		index[k] = ws
	}
	ws.add(w, wildcard, names)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		ws.remove(w)
	}
}

// sotwResponse returns the response a state-of-the-world watch needs, or
// nil when the proxy already has this state. always answers a first
// request even when the proxy would get nothing.
func sotwResponse(w *sotwWatch, s *set, always bool) *response {
	var held []*entry
	if w.sub.wildcard {
		held = s.byName()
	} else {
		for name := range w.sub.names {
			if e, ok := s.entries.get(name); ok {
				held = append(held, e)
			}
		}
		slices.SortFunc(held, compareNames)
	}
	returned := w.sub.returned
	same := len(held) == len(returned)
	for _, e := range held {
		if returned[e.Name] != e.Version {
			same = false
			break
		}
	}
	if same && !always {
		return nil
	}
	// LDS and CDS responses are the whole state; EDS and RDS responses
	// carry only what the proxy does not have yet.
	full := always || w.typeURL == resources.ListenerType || w.typeURL == resources.ClusterType
	r := &response{watch: w, version: s.version, returned: make(map[string]string, len(held)), resources: make([]*anypb.Any, 0, len(held))}
	for _, e := range held {
		if full || returned[e.Name] != e.Version {
			r.resources = append(r.resources, e.Any())
		}
		r.returned[e.Name] = e.Version
	}
	return r
}

// deltaResponse returns the changes a delta watch needs, or nil when there
// are none (and the watch need not be answered anyway).
func deltaResponse(w *deltaWatch, s *set, always bool) *deltaResp {
	if w.sub.wildcard {
		return wildcardDeltaResponse(w, s, always)
	}
	returned := w.sub.versions
	next := make(map[string]string, len(returned))
	r := &deltaResp{typeURL: w.typeURL, version: s.version, watch: w}
	for name := range w.sub.names {
		if e, ok := s.entries.get(name); ok {
			next[name] = e.Version
			if returned[name] != e.Version {
				r.resources = append(r.resources, e.Delta())
			}
		} else if _, had := returned[name]; had {
			r.removed = append(r.removed, name)
		}
	}
	return r.finish(next, always)
}

// errFellBehind ends the stream of a wildcard client that cannot be
// compared with its set: it reconnects, and its initial resource versions
// say what it holds.
var errFellBehind = status.Error(codes.Unavailable, "the client fell further behind than the server remembers; reconnect")

// wildcardDeltaResponse answers a wildcard watch (a ztunnel holds every
// address of its network). A client that said what it holds (its first
// request, with or without initial resource versions) is compared with
// every entry; after that it is known by the set revision it has, and
// gets what changed since. It is then marked as holding the set's
// revision: the cache answers under its lock, and the stream reads the
// subscription again only after the response.
func wildcardDeltaResponse(w *deltaWatch, s *set, always bool) *deltaResp {
	s.track()
	sub := w.sub
	var r *deltaResp
	switch {
	case sub.versions != nil:
		r = s.compareAll(w, always)
	case sub.set != s || sub.rev < s.floor:
		sub.set = nil
		return &deltaResp{typeURL: w.typeURL, err: errFellBehind}
	default:
		r = s.changesSince(w, always)
	}
	sub.versions, sub.resend = nil, nil
	sub.set, sub.rev = s, s.rev
	return r
}

// compareAll answers a wildcard client by comparing every entry with the
// versions it said it holds. With none, it gets everything: one encoding
// per set revision, shared by every client that connects to it.
func (s *set) compareAll(w *deltaWatch, always bool) *deltaResp {
	returned := w.sub.versions
	if len(returned) == 0 {
		if s.entries.len() == 0 && !always {
			return nil
		}
		full := s.full.Value()
		if full == nil || s.fullRev != s.rev {
			full = encodeFull(w.typeURL, s.version, s.byName())
			s.full, s.fullRev = weak.Make(full), s.rev
		}
		return &deltaResp{typeURL: w.typeURL, version: s.version, encoded: full}
	}
	r := &deltaResp{typeURL: w.typeURL, version: s.version}
	for _, e := range s.byName() { // sorted: finish's sort has nothing to do
		if returned[e.Name] != e.Version {
			r.resources = append(r.resources, e.Delta())
		}
	}
	for name := range returned {
		if _, ok := s.entries.get(name); !ok {
			r.removed = append(r.removed, name)
		}
	}
	return r.finish(nil, always)
}

// changesSince answers a wildcard client that holds an earlier revision
// of the set: the names changed since (from the set's log, or else from
// its entries' revisions and its tombstones), and those it asked again.
// An entry changed and changed back is sent again; a name added and
// removed since is removed again: both are harmless, and cheaper than
// remembering the client's versions.
func (s *set) changesSince(w *deltaWatch, always bool) *deltaResp {
	sub := w.sub
	if sub.rev == s.rev && len(sub.resend) == 0 {
		if !always {
			return nil
		}
		return &deltaResp{typeURL: w.typeURL, version: s.version}
	}
	r := &deltaResp{typeURL: w.typeURL, version: s.version}
	consider := func(name string) {
		if e, ok := s.entries.get(name); ok {
			r.resources = append(r.resources, e.Delta())
		} else {
			r.removed = append(r.removed, name)
		}
	}
	names, ok := s.changedSince(sub.rev)
	if !ok {
		names = names[:0]
		for name, rev := range s.revs {
			if rev > sub.rev {
				names = append(names, name)
			}
		}
		for name, rev := range s.removed {
			if rev > sub.rev {
				names = append(names, name)
			}
		}
	}
	for _, name := range names {
		consider(name)
	}
	for name := range sub.resend {
		if !slices.Contains(names, name) {
			consider(name)
		}
	}
	return r.finish(nil, always)
}

// deltaAnswer returns what a new delta watch must be sent at once, or nil
// when it waits for a change.
func (s *set) deltaAnswer(w *deltaWatch) *deltaResp {
	return deltaResponse(w, s, w.first && w.sub.wildcard)
}

func (r *deltaResp) finish(returned map[string]string, always bool) *deltaResp {
	if len(r.resources) == 0 && len(r.removed) == 0 && !always {
		return nil
	}
	slices.SortFunc(r.resources, func(a, b *adspb.Resource) int { return strings.Compare(a.GetName(), b.GetName()) })
	slices.Sort(r.removed)
	r.returned = returned
	return r
}

// response is a state-of-the-world response over shared, encoded
// resources, the watch it answers (and so its type), and the versions the
// proxy holds once it has it.
type response struct {
	watch     *sotwWatch
	version   string
	resources []*anypb.Any
	returned  map[string]string
}

// deltaResp is a delta response over shared, encoded resources, and the
// versions the proxy holds once it has it.
type deltaResp struct {
	typeURL   string
	version   string
	resources []*adspb.Resource
	removed   []string
	returned  map[string]string
	// encoded, when set, is the whole response already encoded (a
	// wildcard client's first): resources are its.
	encoded *encodedResponse
	// err ends the stream instead of answering it.
	err error
	// watch is the watch a by-name answer answers (nil for a wildcard
	// one): only the type's open watch's answer is sent.
	watch *deltaWatch
}

// encodedResponse is a delta response encoded once, without a nonce, for
// every stream that sends it.
type encodedResponse struct {
	resources []*adspb.Resource
	body      []byte
}

// nonceField is the field number of a delta response's nonce.
var nonceField = (&adspb.DeltaDiscoveryResponse{}).ProtoReflect().Descriptor().Fields().ByName("nonce").Number()

// encodeFull encodes the response that gives a client every entry.
func encodeFull(typeURL, version string, entries []*entry) *encodedResponse {
	resources := make([]*adspb.Resource, len(entries))
	for i, e := range entries {
		resources[i] = e.Delta()
	}
	m := &adspb.DeltaDiscoveryResponse{SystemVersionInfo: version, Resources: resources, TypeUrl: typeURL}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// The entries were encoded and decoded already: a failure here is
		// a bug, and each stream then encodes its own (and reports it).
		return &encodedResponse{resources: resources}
	}
	return &encodedResponse{resources: resources, body: body}
}

// wire is what the stream sends: the message, or the shared encoding
// followed by the stream's nonce (a protobuf message may carry its fields
// in any order).
func (r *deltaResp) wire(nonce string) any {
	if r.encoded == nil || r.encoded.body == nil {
		return r.message(nonce)
	}
	tail := protowire.AppendTag(nil, nonceField, protowire.BytesType)
	return grpccodec.Encoded{Body: r.encoded.body, Tail: protowire.AppendString(tail, nonce)}
}

// message builds the response with its nonce (the stream's).
func (r *deltaResp) message(nonce string) *adspb.DeltaDiscoveryResponse {
	if r.encoded != nil {
		return &adspb.DeltaDiscoveryResponse{
			SystemVersionInfo: r.version, Resources: r.encoded.resources, TypeUrl: r.typeURL, Nonce: nonce,
		}
	}
	return &adspb.DeltaDiscoveryResponse{
		SystemVersionInfo: r.version, Resources: r.resources, RemovedResources: r.removed, TypeUrl: r.typeURL, Nonce: nonce,
	}
}
