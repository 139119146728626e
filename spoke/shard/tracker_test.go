package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation/federationpb"
)

func ep(addr string) *federationpb.Endpoint {
	return &federationpb.Endpoint{Namespace: "demo", Service: "echo", Address: addr, Ready: true}
}

func started(t *testing.T) *Tracker {
	t.Helper()
	tr := NewTracker()
	tr.Update(time.Now(), true, func(w Writer) {
		w.SetCluster(&federationpb.Cluster{Id: "east"})
		w.PutService(&federationpb.Service{Namespace: "demo", Name: "echo"})
		w.SetEndpoints("demo/echo", []*federationpb.Endpoint{ep("10.0.0.1"), ep("10.0.0.2")})
	})
	u := tr.Next("n1")
	if u == nil || !u.GetFull() || len(u.GetEndpoints()) != 2 || u.GetCluster() == nil {
		t.Fatalf("first update %v, want the full state", u)
	}
	return tr
}

func TestTrackerDeltas(t *testing.T) {
	tr := started(t)
	tr.Update(time.Now(), true, func(w Writer) {
		w.SetEndpoints("demo/echo", []*federationpb.Endpoint{ep("10.0.0.1"), ep("10.0.0.3")})
	})
	if tr.Next("n2") != nil {
		t.Fatal("a second update left while the first was in flight")
	}
	tr.Acked(1)
	// A change made twice before sending leaves once.
	tr.Update(time.Now(), true, func(w Writer) {
		w.SetEndpoints("demo/echo", []*federationpb.Endpoint{ep("10.0.0.1"), ep("10.0.0.3")})
	})
	u := tr.Next("n2")
	if u.GetFull() || u.GetVersion() != 2 || len(u.GetEndpoints()) != 1 || u.GetEndpoints()[0].GetAddress() != "10.0.0.3" ||
		len(u.GetRemovedEndpoints()) != 1 || u.GetRemovedEndpoints()[0] != "demo/echo/10.0.0.2" || u.GetObservedTime() == nil {
		t.Fatalf("delta %v", u)
	}
	tr.Acked(2)
	if tr.Next("n3") != nil {
		t.Error("an update with nothing changed")
	}
	tr.Update(time.Now(), true, func(w Writer) { w.PutService(&federationpb.Service{Namespace: "demo", Name: "echo"}) })
	if tr.Next("n3") != nil {
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
			tr.Update(time.Now(), true, func(w Writer) {
				w.SetEndpoints("demo/echo", []*federationpb.Endpoint{ep("10.0.0.1")})
			})
			if u := tr.Next("n2"); u.GetVersion() != 2 {
				t.Fatalf("delta %v", u)
			}
			h := tr.Hello("east", "")
			if h.GetAckedVersion() != 1 || h.GetSentVersion() != 2 || h.GetSession() != tr.Session() {
				t.Fatalf("hello %v", h)
			}
			tr.Reconnected(tc.resume, tc.version)
			u := tr.Next("n3")
			switch {
			case tc.wantFull:
				if !u.GetFull() || len(u.GetEndpoints()) != 1 {
					t.Fatalf("after reconnect %v, want the full state", u)
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
	u := tr.Next("n2")
	if !u.GetFull() || u.GetVersion() != 2 {
		t.Fatalf("after a Nack %v, want the full state as version 2", u)
	}
}

func TestTrackerWaitsForInitialState(t *testing.T) {
	tr := NewTracker()
	tr.Update(time.Now(), false, func(w Writer) { w.SetCluster(&federationpb.Cluster{Id: "east"}) })
	if u := tr.Next("n"); u != nil {
		t.Fatalf("sent %v before the source's initial state", u)
	}
	tr.Update(time.Now(), true, func(Writer) {})
	if u := tr.Next("n"); !u.GetFull() {
		t.Fatalf("got %v, want the full state", u)
	}
}

func BenchmarkTrackerSetEndpoints(b *testing.B) {
	tr := NewTracker()
	eps := make([]*federationpb.Endpoint, 10_000)
	for i := range eps {
		eps[i] = ep(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	tr.Update(time.Now(), true, func(w Writer) { w.SetEndpoints("demo/echo", eps) })
	b.ReportAllocs()
	for b.Loop() {
		tr.Update(time.Now(), true, func(w Writer) { w.SetEndpoints("demo/echo", eps) })
	}
}

// TestTrackerSharesLocalities: the endpoints and workloads a tracker holds
// point to one Locality per distinct value.
func TestTrackerSharesLocalities(t *testing.T) {
	zone := func(z string) *federationpb.Locality { return &federationpb.Locality{Region: "r1", Zone: z} }
	a, b, c := ep("10.0.0.1"), ep("10.0.0.2"), ep("10.0.0.3")
	a.Locality, b.Locality, c.Locality = zone("z1"), zone("z1"), zone("z2")
	w := &federationpb.Workload{Uid: "u1", Namespace: "demo", Name: "p", Ips: []string{"10.0.0.1"}, Locality: zone("z1")}
	tr := NewTracker()
	tr.Update(time.Now(), true, func(wr Writer) {
		wr.SetEndpoints("demo/echo", []*federationpb.Endpoint{a, b, c})
		wr.PutWorkload(w)
	})
	if a.Locality != b.Locality || a.Locality != w.Locality || a.Locality == c.Locality || c.Locality.GetZone() != "z2" {
		t.Errorf("localities not shared by value: %p %p %p %p", a.Locality, b.Locality, w.Locality, c.Locality)
	}
}
