package shard

import (
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// replicated is a tracker streaming to several hub replicas, and the one
// service it tracks, which it writes anew when the tracker asks.
type replicated struct {
	*Tracker
	t       testing.TB
	eps     []string
	resyncs int
}

func (r *replicated) write(w Writer) {
	w.SetCluster(&federationpb.Cluster{Id: "east"})
	must(r.t, w.PutService(&federationpb.Service{Namespace: "demo", Name: "echo"}))
	var eps []*federationpb.Endpoint
	for _, a := range r.eps {
		eps = append(eps, ep(a))
	}
	must(r.t, w.SetEndpoints("demo/echo", eps))
}

func (r *replicated) set(addrs ...string) {
	r.eps = addrs
	r.Update(time.Now(), true, r.write)
}

// next returns s's next update, answering a resync the tracker asks for
// first, as the builder does.
func (r *replicated) next(t *testing.T, s *Stream, nonce string) *federationpb.ShardUpdate {
	t.Helper()
	if u := next(t, s, nonce); u != nil {
		return u
	}
	if !resyncIfAsked(r.Tracker, r.write) {
		return nil
	}
	r.resyncs++
	return next(t, s, nonce)
}

func endpointAddresses(u *federationpb.ShardUpdate) []string {
	var out []string
	for _, e := range u.GetEndpoints() {
		out = append(out, e.GetAddress())
	}
	slices.Sort(out)
	return out
}

// Each stream moves at its own pace: a replica that acknowledged less
// gets every change since, in one delta; each change is encoded once.
func TestTrackerStreamsAreIndependent(t *testing.T) {
	r := &replicated{Tracker: NewTracker(), t: t}
	a, b := r.Open(), r.Open()
	r.set("10.0.0.1", "10.0.0.2")
	for _, s := range []*Stream{a, b} {
		if u := r.next(t, s, "n1"); !u.GetFull() || u.GetVersion() != 1 || len(u.GetEndpoints()) != 2 {
			t.Fatalf("first update %v, want the full state", u)
		}
	}
	if r.resyncs != 0 {
		t.Errorf("%d resyncs for streams opened before the first write, want none", r.resyncs)
	}
	a.Acked(1)
	b.Acked(1)

	r.set("10.0.0.1", "10.0.0.3")
	ra, rb := a.dirty[objKey{kindEndpoint, "demo/echo/10.0.0.3"}], b.dirty[objKey{kindEndpoint, "demo/echo/10.0.0.3"}]
	if ra == "" || unsafe.StringData(string(ra)) != unsafe.StringData(string(rb)) {
		t.Error("the streams hold two encodings of one change, want one shared")
	}
	if u := r.next(t, a, "n2"); u.GetFull() || !slices.Equal(endpointAddresses(u), []string{"10.0.0.3"}) {
		t.Fatalf("a's delta %v", u)
	}
	a.Acked(2)
	r.set("10.0.0.4")
	if u := r.next(t, a, "n3"); !slices.Equal(endpointAddresses(u), []string{"10.0.0.4"}) || len(u.GetRemovedEndpoints()) != 2 {
		t.Errorf("a's second delta %v, want 10.0.0.4 and two removals", u)
	}
	u := r.next(t, b, "n2")
	if u.GetFull() || u.GetVersion() != 2 || !slices.Equal(endpointAddresses(u), []string{"10.0.0.4"}) {
		t.Errorf("b's delta %v, want version 2 with every change since version 1", u)
	}
	if removed := slices.Sorted(slices.Values(u.GetRemovedEndpoints())); !slices.Equal(removed, []string{"demo/echo/10.0.0.1", "demo/echo/10.0.0.2", "demo/echo/10.0.0.3"}) {
		// 10.0.0.3 came and went: its removal is one the hub ignores.
		t.Errorf("b's removals %v, want 10.0.0.1, 10.0.0.2 and 10.0.0.3", removed)
	}
}

// A replica that lost the shard gets the full state; the rewrite that
// makes it costs the others nothing but what really changed.
func TestTrackerResyncOfOneStream(t *testing.T) {
	r := &replicated{Tracker: NewTracker(), t: t}
	a, b := r.Open(), r.Open()
	r.set("10.0.0.1", "10.0.0.2")
	for _, s := range []*Stream{a, b} {
		s.Acked(r.next(t, s, "n1").GetVersion())
	}
	b.Reconnected(false, 0)                  // b's hub restarted
	r.eps = []string{"10.0.0.1", "10.0.0.3"} // and a change lands with the rewrite
	u := r.next(t, b, "n2")
	if !u.GetFull() || !slices.Equal(endpointAddresses(u), []string{"10.0.0.1", "10.0.0.3"}) || u.GetCluster() == nil || r.resyncs != 1 {
		t.Fatalf("b's update %v (%d resyncs), want the full state", u, r.resyncs)
	}
	u = r.next(t, a, "n2")
	if u.GetFull() || !slices.Equal(endpointAddresses(u), []string{"10.0.0.3"}) || !slices.Equal(u.GetRemovedEndpoints(), []string{"demo/echo/10.0.0.2"}) ||
		len(u.GetServices()) != 0 || u.GetCluster() != nil {
		t.Errorf("a's update %v, want only the change the rewrite carried", u)
	}
	a.Acked(u.GetVersion())
	if u := r.next(t, a, "n3"); u != nil {
		t.Errorf("a's next update %v, want nothing", u)
	}
}

// A stream opened after the shard was written starts with the full state,
// and leaves the others alone.
func TestTrackerOpenLaterAndClose(t *testing.T) {
	r := &replicated{Tracker: NewTracker(), t: t}
	a := r.Open()
	r.set("10.0.0.1")
	a.Acked(r.next(t, a, "n1").GetVersion())

	b := r.Open()
	if u := r.next(t, b, "n1"); !u.GetFull() || !slices.Equal(endpointAddresses(u), []string{"10.0.0.1"}) || r.resyncs != 1 {
		t.Fatalf("the new stream's first update %v (%d resyncs), want the full state", u, r.resyncs)
	}
	if u := r.next(t, a, "n2"); u != nil {
		t.Errorf("the old stream got %v from the new one's rewrite, want nothing", u)
	}
	b.Close()
	r.set("10.0.0.2")
	if len(b.dirty) != 0 || b.Next("n", 0) != nil {
		t.Error("a closed stream still collects changes")
	}
	if u := r.next(t, a, "n2"); !slices.Equal(endpointAddresses(u), []string{"10.0.0.2"}) {
		t.Errorf("a's delta %v", u)
	}
}
