package shard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
	"github.com/meshfed/meshfed/spoke/shard/shardtest"
)

func ep(addr string) *federationpb.Endpoint {
	return &federationpb.Endpoint{Namespace: "demo", Service: "echo", Address: addr, Ready: true}
}

// testShard is a tracker and the one service whose endpoints it tracks,
// which it writes anew when the tracker asks (as a Builder does).
type testShard struct {
	tracked
	t       testing.TB
	eps     []*federationpb.Endpoint
	resyncs int
}

func newTestShard(tb testing.TB) *testShard {
	tb.Helper()
	return &testShard{tracked: newTracked(), t: tb}
}

// Next answers a resync the tracker asks for at once, as a Builder's Run
// would before the next update.
func (s *testShard) Next(nonce string, maxBytes int) syncproto.Update {
	if u := s.Stream.Next(nonce, maxBytes); u != nil {
		return u
	}
	if !resyncIfAsked(s.Tracker, s.write) {
		return nil
	}
	s.resyncs++
	return s.Stream.Next(nonce, maxBytes)
}

// resyncIfAsked writes the whole shard anew with write when the tracker
// has asked for it, as a Builder's Run does, and reports whether it had.
func resyncIfAsked(t *Tracker, write func(Writer)) bool {
	select {
	case <-t.Resync():
	default:
		return false
	}
	t.Update(time.Now(), false, func(w Writer) {
		w.Reset()
		write(w)
	})
	return true
}

func (s *testShard) write(w Writer) {
	w.SetCluster(&federationpb.Cluster{Id: "east"})
	must(s.t, w.PutService(&federationpb.Service{Namespace: "demo", Name: "echo"}))
	must(s.t, w.SetEndpoints("demo/echo", s.eps))
}

// setEndpoints gives the service endpoints at addrs.
func (s *testShard) setEndpoints(addrs ...string) {
	s.eps = nil
	for _, a := range addrs {
		s.eps = append(s.eps, ep(a))
	}
	s.Update(time.Now(), true, s.write)
}

// started returns a tracker whose first update (two endpoints) is in
// flight.
func started(t *testing.T) *testShard {
	t.Helper()
	tr := newTestShard(t)
	tr.setEndpoints("10.0.0.1", "10.0.0.2")
	u := next(t, tr, "n1")
	if u == nil || !u.GetFull() || len(u.GetEndpoints()) != 2 || u.GetCluster() == nil {
		t.Fatalf("first update %v, want the full state", u)
	}
	if tr.resyncs != 0 {
		t.Fatalf("%d resyncs for the first full state, want none: the tracker has it", tr.resyncs)
	}
	return tr
}

func TestTrackerDeltas(t *testing.T) {
	tr := started(t)
	tr.setEndpoints("10.0.0.1", "10.0.0.3")
	if next(t, tr, "n2") != nil {
		t.Fatal("a second update left while the first was in flight")
	}
	if !tr.Acked(1) {
		t.Error("the Ack of the first (full) update is not reported as one of a full state")
	}
	// A change made twice before sending leaves once.
	tr.setEndpoints("10.0.0.1", "10.0.0.3")
	u := next(t, tr, "n2")
	if u.GetFull() || u.GetVersion() != 2 || len(u.GetEndpoints()) != 1 || u.GetEndpoints()[0].GetAddress() != "10.0.0.3" ||
		len(u.GetRemovedEndpoints()) != 1 || u.GetRemovedEndpoints()[0] != "demo/echo/10.0.0.2" || u.GetObservedTime() == nil {
		t.Fatalf("delta %v", u)
	}
	if tr.Acked(2) {
		t.Error("the Ack of a delta is reported as one of a full state")
	}
	if next(t, tr, "n3") != nil {
		t.Error("an update with nothing changed")
	}
	tr.Update(time.Now(), true, func(w Writer) { must(t, w.PutService(&federationpb.Service{Namespace: "demo", Name: "echo"})) })
	if next(t, tr, "n3") != nil {
		t.Error("an identical object was sent again")
	}
}

func TestTrackerReconnect(t *testing.T) {
	tests := []struct {
		name     string
		resume   bool
		version  uint64 // the hub's version in Welcome
		wantFull bool
		wantKeys int // objects in the next delta
	}{
		{"hub lost the session", false, 0, true, 0},
		{"hub applied the in-flight delta", true, 2, false, 0},
		{"hub has only the acked version", true, 1, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := started(t)
			tr.Acked(1)
			tr.setEndpoints("10.0.0.1")
			if u := next(t, tr, "n2"); u.GetVersion() != 2 {
				t.Fatalf("delta %v", u)
			}
			h := tr.Hello("east", "")
			if h.GetAckedVersion() != 1 || h.GetSentVersion() != 2 || h.GetSession() != tr.Session() {
				t.Fatalf("hello %v", h)
			}
			tr.Reconnected(tc.resume, tc.version)
			u := next(t, tr, "n3")
			switch {
			case tc.wantFull:
				if !u.GetFull() || len(u.GetEndpoints()) != 1 || u.GetEndpoints()[0].GetAddress() != "10.0.0.1" ||
					len(u.GetServices()) != 1 || u.GetCluster() == nil || len(u.GetRemovedEndpoints()) != 0 {
					t.Fatalf("after reconnect %v, want the full state", u)
				}
				if tr.resyncs != 1 {
					t.Errorf("%d resyncs, want 1", tr.resyncs)
				}
			case tc.wantKeys == 0:
				if u != nil {
					t.Fatalf("after reconnect %v, want nothing to send", u)
				}
			default:
				if u.GetFull() || len(u.GetRemovedEndpoints()) != tc.wantKeys {
					t.Fatalf("after reconnect %v, want the in-flight delta again", u)
				}
			}
		})
	}
}

func TestTrackerNackSendsFullState(t *testing.T) {
	tr := started(t)
	if tr.Nacked(7) {
		t.Error("a Nack of a version not in flight was taken")
	}
	if !tr.Nacked(1) {
		t.Fatal("the Nack of the in-flight version was ignored")
	}
	u := next(t, tr, "n2")
	if !u.GetFull() || u.GetVersion() != 2 || len(u.GetEndpoints()) != 2 || tr.resyncs != 1 {
		t.Fatalf("after a Nack %v (%d resyncs), want the full state as version 2", u, tr.resyncs)
	}
}

// TestTrackerWithoutResync: a tracker nobody can resync sends its first
// full state, and no other.
func TestTrackerWithoutResync(t *testing.T) {
	tr := newTracked()
	tr.Update(time.Now(), true, func(w Writer) { must(t, w.SetEndpoints("demo/echo", []*federationpb.Endpoint{ep("10.0.0.1")})) })
	if u := next(t, tr, "n1"); !u.GetFull() || len(u.GetEndpoints()) != 1 {
		t.Fatalf("first update %v, want the full state", u)
	}
	tr.Reconnected(false, 0)
	if u := next(t, tr, "n2"); u != nil {
		t.Errorf("sent %v without a resync", u)
	}
}

func TestTrackerWaitsForInitialState(t *testing.T) {
	tr := newTracked()
	tr.Update(time.Now(), false, func(w Writer) { w.SetCluster(&federationpb.Cluster{Id: "east"}) })
	if u := next(t, tr, "n"); u != nil {
		t.Fatalf("sent %v before the source's initial state", u)
	}
	tr.Update(time.Now(), true, func(Writer) {})
	if u := next(t, tr, "n"); !u.GetFull() {
		t.Fatalf("got %v, want the full state", u)
	}
}

func BenchmarkTrackerSetEndpoints(b *testing.B) {
	tr := newTracked()
	eps := make([]*federationpb.Endpoint, 10_000)
	for i := range eps {
		eps[i] = ep(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	tr.Update(time.Now(), true, func(w Writer) { must(b, w.SetEndpoints("demo/echo", eps)) })
	b.ReportAllocs()
	for b.Loop() {
		tr.Update(time.Now(), true, func(w Writer) { must(b, w.SetEndpoints("demo/echo", eps)) })
	}
}

// TestTrackerChunks: a full update larger than the limit leaves in chunks
// under it that together hold the whole shard.
func TestTrackerChunks(t *testing.T) {
	const n = 2_000
	eps := make([]*federationpb.Endpoint, n)
	for i := range eps {
		eps[i] = ep(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	tr := newTracked()
	tr.Update(time.Now(), true, func(w Writer) {
		w.SetCluster(&federationpb.Cluster{Id: "east"})
		if err := w.PutService(&federationpb.Service{Namespace: "demo", Name: "echo"}); err != nil {
			t.Fatal(err)
		}
		if err := w.SetEndpoints("demo/echo", eps); err != nil {
			t.Fatal(err)
		}
	})
	const maxBytes = 16 << 10
	chunks := shardtest.Chunks(tr.Next("n1", maxBytes))
	if len(chunks) < 4 {
		t.Fatalf("%d chunks, want several", len(chunks))
	}
	for i, c := range chunks {
		if size := proto.Size(c); size > maxBytes {
			t.Errorf("chunk %d is %d bytes, over %d", i, size, maxBytes)
		}
	}
	u := shardtest.Assemble(t, chunks)
	if !u.GetFull() || u.GetCluster().GetId() != "east" || len(u.GetServices()) != 1 || len(u.GetEndpoints()) != n {
		t.Fatalf("assembled: full=%v cluster=%v, %d services, %d endpoints", u.GetFull(), u.GetCluster(), len(u.GetServices()), len(u.GetEndpoints()))
	}
	got := map[string]bool{}
	for _, e := range u.GetEndpoints() {
		if !proto.Equal(e, ep(e.GetAddress())) {
			t.Fatalf("endpoint %v differs from what was set", e)
		}
		got[e.GetAddress()] = true
	}
	if len(got) != n {
		t.Errorf("%d distinct endpoints, want %d", len(got), n)
	}
}

// TestTrackerRejectsUnencodable: an object proto cannot encode is kept
// out, with an error naming it, and the rest of the shard is unaffected;
// a version that cannot be encoded of an object the shard holds leaves the
// one it holds.
func TestTrackerRejectsUnencodable(t *testing.T) {
	tr := started(t)
	tr.Acked(1)
	bad := ep("10.0.0.9")
	bad.Hostname = "\xff"
	var errEndpoints, errWorkload error
	tr.Update(time.Now(), true, func(w Writer) {
		errEndpoints = w.SetEndpoints("demo/echo", []*federationpb.Endpoint{ep("10.0.0.1"), ep("10.0.0.2"), bad})
		errWorkload = w.PutWorkload(&federationpb.Workload{Uid: "u1", Name: "\xff"})
	})
	if errEndpoints == nil || !strings.Contains(errEndpoints.Error(), "demo/echo/10.0.0.9") {
		t.Errorf("SetEndpoints error %v, want one naming demo/echo/10.0.0.9", errEndpoints)
	}
	if errWorkload == nil || !strings.Contains(errWorkload.Error(), "u1") {
		t.Errorf("PutWorkload error %v, want one naming u1", errWorkload)
	}
	if u := next(t, tr, "n2"); u != nil {
		t.Errorf("sent %v, want nothing: only unencodable objects changed", u)
	}
	if _, e, w := tr.Counts(); e != 2 || w != 0 {
		t.Errorf("%d endpoints and %d workloads, want 2 and 0", e, w)
	}

	tr.Update(time.Now(), true, func(w Writer) { must(t, w.PutWorkload(&federationpb.Workload{Uid: "u2", Name: "good"})) })
	u := next(t, tr, "n3")
	if u == nil {
		t.Fatal("the good workload was not sent")
	}
	tr.Acked(u.GetVersion())
	var errService error
	tr.Update(time.Now(), true, func(w Writer) {
		badCopy := ep("10.0.0.1")
		badCopy.Hostname = "\xff"
		errEndpoints = w.SetEndpoints("demo/echo", []*federationpb.Endpoint{badCopy, ep("10.0.0.2")})
		errWorkload = w.PutWorkload(&federationpb.Workload{Uid: "u2", Name: "\xff"})
		errService = w.PutService(&federationpb.Service{Namespace: "demo", Name: "echo", Hostname: "\xff"})
	})
	if errEndpoints == nil || errWorkload == nil || errService == nil {
		t.Errorf("errors %v, %v, %v; want three", errEndpoints, errWorkload, errService)
	}
	if u := next(t, tr, "n4"); u != nil {
		t.Errorf("sent %v, want nothing: the good versions stay", u)
	}
	if s, e, w := tr.Counts(); s != 1 || e != 2 || w != 1 {
		t.Errorf("%d services, %d endpoints and %d workloads, want 1, 2 and 1", s, e, w)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type nexter interface {
	Next(nonce string, maxBytes int) syncproto.Update
}

// next returns the tracker's next update, assembled.
func next(t *testing.T, tr nexter, nonce string) *federationpb.ShardUpdate {
	t.Helper()
	u := tr.Next(nonce, 0)
	if u == nil {
		return nil
	}
	return shardtest.Assemble(t, shardtest.Chunks(u))
}

// tracked is a tracker with one stream, as a spoke with one hub replica
// has: the tests call either's methods on it.
type tracked struct {
	*Tracker
	*Stream
}

func newTracked() tracked {
	t := NewTracker()
	return tracked{t, t.Open()}
}
