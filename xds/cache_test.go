package xds

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/grpccodec"
	"github.com/meshfed/meshfed/xds/translate"
)

func cluster(name string, seconds int64) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ConnectTimeout: &durationpb.Duration{Seconds: seconds}}
}

func mustUpdate(t *testing.T, c *Cache, upserts map[string]proto.Message, removals ...string) {
	t.Helper()
	update(t, c, resourcev3.ClusterType, upserts, removals...)
}

// update encodes upserts and applies them, with removals, to the shared
// set of a type.
func update(t *testing.T, c *Cache, typeURL string, upserts map[string]proto.Message, removals ...string) {
	t.Helper()
	u := translate.SetUpdate{TypeURL: typeURL, Removals: removals}
	for _, name := range slices.Sorted(maps.Keys(upserts)) {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(upserts[name])
		if err != nil {
			t.Fatal(err)
		}
		u.Upserts = append(u.Upserts, translate.NewResource(typeURL, name, b))
	}
	c.Apply(u)
}

// recvSotw returns the response waiting on ch, nil when there is none.
func recvSotw(t *testing.T, ch chan *response) *response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	default:
		return nil
	}
}

// watchSotw opens a state-of-the-world watch on the shared set of typeURL.
func watchSotw(c *Cache, typeURL string, first bool, sub *sotwSubscription, ch chan *response) func() {
	return c.watchSotw("", &sotwWatch{typeURL: typeURL, first: first, sub: sub, ch: ch})
}

func TestCacheStateOfTheWorld(t *testing.T) {
	c := NewCache()
	mustUpdate(t, c, map[string]proto.Message{"a": cluster("a", 1), "b": cluster("b", 1)})
	sub := newSotwSubscription(nil, true) // wildcard
	ch := make(chan *response, 1)

	watchSotw(c, resourcev3.ClusterType, true, sub, ch)
	r := <-ch
	if len(r.resources) != 2 {
		t.Fatalf("first response has %d resources, want 2", len(r.resources))
	}
	sub.returned = r.returned

	// The client is up to date: the watch waits.
	cancel := watchSotw(c, resourcev3.ClusterType, false, sub, ch)
	if got := recvSotw(t, ch); got != nil {
		t.Fatalf("an up-to-date client was answered: %v", got)
	}
	// The same content again changes nothing.
	mustUpdate(t, c, map[string]proto.Message{"a": cluster("a", 1)})
	if got := recvSotw(t, ch); got != nil {
		t.Fatalf("an unchanged resource was pushed: %v", got)
	}
	// A change answers the open watch with the full state.
	mustUpdate(t, c, map[string]proto.Message{"a": cluster("a", 2)}, "b")
	resp := recvSotw(t, ch)
	if resp == nil {
		t.Fatal("the change was not pushed to the open watch")
	}
	if len(resp.resources) != 1 {
		t.Fatalf("after the change: %v, want the one remaining cluster", resp.resources)
	}
	cancel()
	sub.returned = resp.returned

	// A cancelled watch is never answered.
	cancel2 := watchSotw(c, resourcev3.ClusterType, false, sub, ch)
	cancel2()
	mustUpdate(t, c, map[string]proto.Message{"c": cluster("c", 1)})
	if got := recvSotw(t, ch); got != nil {
		t.Fatalf("a cancelled watch was answered: %v", got)
	}
}

func TestCacheDelta(t *testing.T) {
	c := NewCache()
	mustUpdate(t, c, map[string]proto.Message{"a": cluster("a", 1), "b": cluster("b", 1)})
	versions := c.Resources(resourcev3.ClusterType, "")

	// A reconnecting wildcard client that has a (current), b (stale) and
	// z (gone) gets b and z's removal only.
	sub := newSubscription(nil, nil, map[string]string{"a": versions["a"], "b": "old", "z": "old"}, true)
	ch := make(chan *deltaResp, 1)
	c.watchDelta("", &deltaWatch{typeURL: resourcev3.ClusterType, first: true, sub: sub, ch: ch})
	r := <-ch
	sub.answered(r) // as the stream does when it sends r
	out := r.message("1")
	var sent []string
	for _, res := range out.GetResources() {
		sent = append(sent, res.GetName())
	}
	if !slices.Equal(sent, []string{"b"}) || !slices.Equal(out.GetRemovedResources(), []string{"z"}) {
		t.Fatalf("sent %v removed %v, want [b] and [z]", sent, out.GetRemovedResources())
	}
	if sub.versions != nil || sub.rev != c.sets[setKey{resourcev3.ClusterType, ""}].rev {
		t.Errorf("after its first response the client holds versions %v at revision %d; want none, and the set's revision", sub.versions, sub.rev)
	}

	// A wildcard client is answered at once even when there is nothing,
	// once the set exists.
	update(t, c, "type.googleapis.com/istio.workload.Address", nil)
	empty := make(chan *deltaResp, 1)
	c.watchDelta("", &deltaWatch{typeURL: "type.googleapis.com/istio.workload.Address", first: true, sub: newSubscription(nil, nil, nil, true), ch: empty})
	select {
	case <-empty:
	default:
		t.Error("a first wildcard request for an empty type was not answered")
	}

	// By name: only subscribed names, removal of one that goes.
	byName := newSubscription([]string{"a"}, nil, nil, false)
	ch2 := make(chan *deltaResp, 1)
	c.watchDelta("", &deltaWatch{typeURL: resourcev3.ClusterType, first: true, sub: byName, ch: ch2})
	r = <-ch2
	byName.versions = r.returned
	c.watchDelta("", &deltaWatch{typeURL: resourcev3.ClusterType, sub: byName, ch: ch2})
	mustUpdate(t, c, nil, "a")
	r = <-ch2
	out = r.message("2")
	if !slices.Equal(out.GetRemovedResources(), []string{"a"}) || len(out.GetResources()) != 0 {
		t.Fatalf("after removing a: %v", out)
	}
}

// TestCacheEncodesOncePerVersion: many watches share one encoding, the
// one applied: the cache never encodes (it takes resources encoded by the
// translator) and never copies one per watch.
func TestCacheEncodesOncePerVersion(t *testing.T) {
	c := NewCache()
	var chans []chan *response
	for range 100 {
		ch := make(chan *response, 1)
		watchSotw(c, resourcev3.ClusterType, false, newSotwSubscription(nil, true), ch)
		chans = append(chans, ch)
	}
	b, err := proto.Marshal(cluster("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	applied := translate.NewResource(resourcev3.ClusterType, "a", b)
	c.Apply(translate.SetUpdate{TypeURL: resourcev3.ClusterType, Upserts: []*translate.Resource{applied}})
	for _, ch := range chans {
		out := recvSotw(t, ch)
		if out == nil {
			t.Fatal("a watch was not answered")
		}
		if got := out.resources[0].GetValue(); &got[0] != &applied.Value[0] {
			t.Fatal("a watch got another encoding than the one applied")
		}
	}
}

// TestCacheSotwPartialForEDS: an EDS response carries only the changed
// assignments; CDS responses stay whole.
func TestCacheSotwPartialForEDS(t *testing.T) {
	c := NewCache()
	update(t, c, resourcev3.EndpointType, map[string]proto.Message{"a": cluster("a", 1), "b": cluster("b", 1)})
	sub := newSotwSubscription([]string{"a", "b"}, false)
	ch := make(chan *response, 1)
	watchSotw(c, resourcev3.EndpointType, true, sub, ch)
	r := <-ch
	sub.returned = r.returned
	watchSotw(c, resourcev3.EndpointType, false, sub, ch)
	update(t, c, resourcev3.EndpointType, map[string]proto.Message{"a": cluster("a", 2)})
	r = <-ch
	if len(r.resources) != 1 || len(r.returned) != 2 {
		t.Fatalf("EDS response with %d resources and %d returned, want the 1 changed of 2", len(r.resources), len(r.returned))
	}
	// A watch on b only is not woken by a change to a.
	subB := newSotwSubscription([]string{"b"}, false)
	chB := make(chan *response, 1)
	watchSotw(c, resourcev3.EndpointType, true, subB, chB)
	rb := <-chB
	subB.returned = rb.returned
	watchSotw(c, resourcev3.EndpointType, false, subB, chB)
	update(t, c, resourcev3.EndpointType, map[string]proto.Message{"a": cluster("a", 3)})
	if got := recvSotw(t, chB); got != nil {
		t.Errorf("a watch on b was answered for a change to a: %v", got)
	}
	if len(c.sotw[setKey{resourcev3.EndpointType, ""}].byName["b"]) != 1 {
		t.Error("the watch on b is no longer indexed")
	}
}

// TestCacheWildcardDeltaFollowsEveryChange: a wildcard delta client gets
// each change once, including one made while it had not yet acknowledged
// the previous response.
// wildcardClient is a wildcard delta subscription to the Address type of
// one cache, as a ztunnel holds, driven by hand.
type wildcardClient struct {
	t   *testing.T
	c   *Cache
	sub *subscription
	ch  chan *deltaResp
}

func newWildcardClient(t *testing.T, c *Cache) *wildcardClient {
	t.Helper()
	return &wildcardClient{t: t, c: c, sub: newSubscription(nil, nil, nil, true), ch: make(chan *deltaResp, 1)}
}

// watch sends a request: the first ("" nonce) or an ACK.
func (w *wildcardClient) watch(nonce string) {
	w.t.Helper()
	w.c.watchDelta("", &deltaWatch{typeURL: AddressType, first: nonce == "", sub: w.sub, ch: w.ch})
}

// recv returns the names the waiting response upserts, then those it
// removes; nil when no response waits.
func (w *wildcardClient) recv() []string {
	w.t.Helper()
	select {
	case r := <-w.ch:
		if r.err != nil {
			return []string{r.err.Error()}
		}
		w.sub.answered(r) // as the stream does when it sends r
		out := r.message("n")
		return append(names(out.GetResources()), out.GetRemovedResources()...)
	default:
		return nil
	}
}

// putAddress sets resource name of the Address set to a version.
func putAddress(t *testing.T, c *Cache, name string, v int64) {
	t.Helper()
	update(t, c, AddressType, map[string]proto.Message{name: cluster(name, v)})
}

func TestCacheWildcardDeltaFollowsEveryChange(t *testing.T) {
	c := NewCache()
	putAddress(t, c, "a", 1)
	putAddress(t, c, "b", 1)
	z := newWildcardClient(t, c)
	z.watch("")
	if got := z.recv(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first response %v", got)
	}
	z.watch("1") // ACK: nothing new
	if got := z.recv(); got != nil {
		t.Fatalf("an up-to-date ACK was answered with %v", got)
	}
	putAddress(t, c, "a", 2) // answers the parked watch with a alone
	if got := z.recv(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after changing a: %v", got)
	}
	putAddress(t, c, "b", 2) // no watch is open: the next ACK must bring b
	z.watch("2")
	if got := z.recv(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("the ACK after an unseen change got %v, want b", got)
	}
	update(t, c, AddressType, nil, "a")
	z.watch("3")
	if got := z.recv(); !slices.Equal(got, []string{"a"}) || z.sub.versions != nil {
		t.Fatalf("after removing a: %v; the stream keeps versions %v, want its set revision alone", got, z.sub.versions)
	}
}

func names(rs []*adspb.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetName())
	}
	return out
}

// TestCacheWildcardDeltaCatchesUp covers a wildcard client whose ACK comes
// after changes it was not sent: within the set's change log it gets the
// names changed since its revision, beyond it a full comparison; and a
// client that stops ACKing costs the set nothing (its state is its
// stream's).
func TestCacheWildcardDeltaCatchesUp(t *testing.T) {
	c := NewCache()
	for _, n := range []string{"a", "b", "c"} {
		putAddress(t, c, n, 1)
	}
	z, gone := newWildcardClient(t, c), newWildcardClient(t, c) // gone never ACKs
	for _, w := range []*wildcardClient{z, gone} {
		w.watch("")
		if got := w.recv(); len(got) != 3 {
			t.Fatalf("first response %v", got)
		}
	}

	putAddress(t, c, "a", 2)
	putAddress(t, c, "a", 3)
	putAddress(t, c, "c", 2)
	z.watch("1")
	if got := z.recv(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("ACK after 3 unseen changes got %v, want a and c", got)
	}
	for i := range maxRecent + 5 {
		putAddress(t, c, "b", int64(10+i))
	}
	z.watch("2")
	if got := z.recv(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("ACK after more changes than the log holds got %v, want b", got)
	}
	s := c.sets[setKey{AddressType, ""}]
	if len(s.recent) != maxRecent || s.recent[0].rev != s.rev-maxRecent+1 || s.recent[maxRecent-1].rev != s.rev {
		t.Errorf("the log has %d entries, of revisions %d to %d; want %d, the last %d of %d", len(s.recent),
			s.recent[0].rev, s.recent[len(s.recent)-1].rev, maxRecent, maxRecent, s.rev)
	}
	if gone.sub.set != s || gone.sub.rev >= s.rev-maxRecent {
		t.Errorf("the client that stopped ACKing is at revision %d of %d, want one beyond the log", gone.sub.rev, s.rev)
	}
}

// TestCacheDropForgetsView: a dropped view leaves nothing behind, its
// watch indexes included.
func TestCacheDropForgetsView(t *testing.T) {
	c := NewCache()
	c.Apply(translate.SetUpdate{TypeURL: AddressType, View: "n1"})
	sub := newSubscription(nil, nil, nil, true)
	ch := make(chan *deltaResp, 1)
	c.watchDelta("n1", &deltaWatch{typeURL: AddressType, first: true, sub: sub, ch: ch})
	<-ch
	cancel := c.watchDelta("n1", &deltaWatch{typeURL: AddressType, sub: sub, ch: ch}) // parks: nothing new
	cancel()
	c.Apply(translate.SetUpdate{TypeURL: AddressType, View: "n1", Drop: true})
	k := setKey{AddressType, "n1"}
	if _, ok := c.sets[k]; ok {
		t.Error("the dropped view's set is still there")
	}
	if _, ok := c.delta[k]; ok {
		t.Error("the dropped view's watch index is still there")
	}
}

// TestCacheSetVersionIsContent: a set's version depends on its resources
// only, not on the path that led there, so hub replicas that hold equal
// sets name them alike and a proxy moving between them is never misled.
func TestCacheSetVersionIsContent(t *testing.T) {
	version := func(c *Cache) string {
		t.Helper()
		for _, st := range c.Sets() {
			if st.Type == resourcev3.ClusterType {
				return st.Version
			}
		}
		t.Fatal("no cluster set")
		return ""
	}
	a, b := NewCache(), NewCache()
	mustUpdate(t, a, map[string]proto.Message{"x": cluster("x", 1), "y": cluster("y", 1)})
	mustUpdate(t, b, map[string]proto.Message{"y": cluster("y", 2)})
	mustUpdate(t, b, map[string]proto.Message{"x": cluster("x", 1), "y": cluster("y", 1), "z": cluster("z", 1)})
	mustUpdate(t, b, nil, "z")
	if va, vb := version(a), version(b); va != vb {
		t.Errorf("equal sets, versions %s and %s", va, vb)
	}
	before := version(a)
	mustUpdate(t, a, map[string]proto.Message{"y": cluster("y", 3)})
	if version(a) == before {
		t.Error("a changed set kept its version")
	}
	mustUpdate(t, a, map[string]proto.Message{"y": cluster("y", 1)})
	if version(a) != before {
		t.Error("a set back to an earlier content has another version")
	}
}

// TestCacheWildcardDeltaRemovalsBeyondTheLog: a wildcard client behind by
// more revisions than the log holds gets the removals it missed from the
// set's tombstones; one behind by more removals than the set remembers is
// asked to reconnect (and say what it holds) rather than left holding
// addresses that are gone.
func TestCacheWildcardDeltaRemovalsBeyondTheLog(t *testing.T) {
	c := NewCache()
	putAddress(t, c, "keep", 1)
	putAddress(t, c, "drop", 1)
	z, far := newWildcardClient(t, c), newWildcardClient(t, c)
	for _, w := range []*wildcardClient{z, far} {
		w.watch("")
		if got := w.recv(); len(got) != 2 {
			t.Fatalf("first response %v", got)
		}
	}
	update(t, c, AddressType, nil, "drop")
	for i := range maxRecent + 1 {
		putAddress(t, c, "keep", int64(10+i))
	}
	z.watch("1")
	if got := z.recv(); !slices.Equal(got, []string{"keep", "drop"}) {
		t.Fatalf("a client behind the log got %v, want keep and the removal of drop", got)
	}

	for i := range minTombstones + 1 {
		name := fmt.Sprintf("churn-%d", i)
		putAddress(t, c, name, 1)
		update(t, c, AddressType, nil, name)
	}
	far.watch("1")
	if got := far.recv(); len(got) != 1 || got[0] != errFellBehind.Error() {
		t.Fatalf("a client behind more removals than the set remembers got %v, want to be asked to reconnect", got)
	}
	s := c.sets[setKey{AddressType, ""}]
	if len(s.tombstones) != minTombstones || len(s.removed) > minTombstones {
		t.Errorf("the set remembers %d removals (%d names), want %d", len(s.tombstones), len(s.removed), minTombstones)
	}
	// Reconnected with what it holds, it is compared in full.
	far.sub = newSubscription(nil, nil, map[string]string{"keep": "stale", "drop": "old"}, true)
	far.watch("")
	if got := far.recv(); !slices.Equal(got, []string{"keep", "drop"}) {
		t.Fatalf("the reconnected client got %v, want keep and the removal of drop", got)
	}
}

// TestCacheWildcardFirstResponseEncodedOnce: every wildcard client that
// connects to one revision of a set gets the same encoding of its first
// response, and that encoding with a stream's nonce after it is the
// response a client decodes.
func TestCacheWildcardFirstResponseEncodedOnce(t *testing.T) {
	c := NewCache()
	putAddress(t, c, "a", 1)
	putAddress(t, c, "b", 1)
	var got []*deltaResp
	for range 3 {
		z := newWildcardClient(t, c)
		z.watch("")
		got = append(got, <-z.ch)
	}
	if got[0].encoded == nil || got[1].encoded != got[0].encoded || got[2].encoded != got[0].encoded {
		t.Fatal("first responses of one revision were encoded more than once")
	}
	wire, ok := got[0].wire("17").(grpccodec.Encoded)
	if !ok {
		t.Fatalf("the first response goes out as %T, want its shared encoding", got[0].wire("17"))
	}
	decoded := &adspb.DeltaDiscoveryResponse{}
	if err := proto.Unmarshal(append(slices.Clip(wire.Body), wire.Tail...), decoded); err != nil {
		t.Fatal(err)
	}
	if want := got[0].message("17"); !proto.Equal(decoded, want) {
		t.Fatalf("the encoding decodes to %v, want %v", decoded, want)
	}
	putAddress(t, c, "a", 2)
	z := newWildcardClient(t, c)
	z.watch("")
	if r := <-z.ch; r.encoded == got[0].encoded {
		t.Fatal("a later revision's first response reused the old encoding")
	}
}

// TestCacheWildcardDeltaAskedAgain: a wildcard client in sync that
// subscribes or unsubscribes a name is told again whether it exists.
func TestCacheWildcardDeltaAskedAgain(t *testing.T) {
	c := NewCache()
	putAddress(t, c, "a", 1)
	z := newWildcardClient(t, c)
	z.watch("")
	z.recv()
	z.sub.update([]string{"a", "missing"}, nil)
	z.watch("1")
	if got := z.recv(); !slices.Equal(got, []string{"a", "missing"}) {
		t.Fatalf("after subscribing a and missing by name: %v, want a and missing's removal", got)
	}
	z.watch("2")
	if got := z.recv(); got != nil {
		t.Fatalf("asked names were sent again: %v", got)
	}
}

// TestCacheSetsByNameKeepNoRevisions: only sets that a wildcard delta
// client reads keep their entries' revisions; an EDS set per locality,
// read by name, would hold a copy of its names for nothing.
func TestCacheSetsByNameKeepNoRevisions(t *testing.T) {
	c := NewCache()
	mustUpdate(t, c, map[string]proto.Message{"a": cluster("a", 1)})
	byName := newSubscription([]string{"a"}, nil, nil, false)
	c.watchDelta("", &deltaWatch{typeURL: resourcev3.ClusterType, first: true, sub: byName, ch: make(chan *deltaResp, 1)})
	if s := c.sets[setKey{resourcev3.ClusterType, ""}]; s.revs != nil {
		t.Fatal("a set read by name keeps revisions")
	}
	z := newWildcardClient(t, c)
	z.c.watchDelta("", &deltaWatch{typeURL: resourcev3.ClusterType, first: true, sub: z.sub, ch: z.ch})
	if s := c.sets[setKey{resourcev3.ClusterType, ""}]; len(s.revs) != 1 {
		t.Fatalf("a set read by a wildcard client keeps revisions of %d entries, want 1", len(s.revs))
	}
}

// TestCacheLeavesSubscriptionsAlone: the cache reads a watch's
// subscription and never writes it; its answer says what the proxy holds
// once it has it, which the stream applies.
func TestCacheLeavesSubscriptionsAlone(t *testing.T) {
	c := NewCache()
	putAddress(t, c, "a", 1)
	initial := map[string]string{"a": "old"}
	sub := newSubscription(nil, nil, initial, true)
	ch := make(chan *deltaResp, 1)
	c.watchDelta("", &deltaWatch{typeURL: AddressType, first: true, sub: sub, ch: ch})
	r := <-ch
	if sub.set != nil || sub.rev != 0 || len(sub.versions) != 1 || sub.versions["a"] != "old" {
		t.Fatalf("the cache changed the subscription: set %p, revision %d, versions %v", sub.set, sub.rev, sub.versions)
	}
	s := c.sets[setKey{AddressType, ""}]
	if r.set != s || r.rev != s.rev {
		t.Fatalf("the answer brings revision %d of %p, want %d of %p", r.rev, r.set, s.rev, s)
	}
	sub.answered(r)
	if sub.set != s || sub.rev != s.rev || sub.versions != nil {
		t.Errorf("once answered the subscription holds revision %d, versions %v", sub.rev, sub.versions)
	}
}
