//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/shard"
)

func TestSyncAckAndDelta(t *testing.T) {
	h := newMemHub(t, registry.Limits{}, 4<<20)
	tr := newTracker()
	fill(tr, "east", "n1", 3)
	d := &killableDialer{client: h.client}
	runUplink(t, "east", tr, d.dial)

	await(t, h.reg, "initial sync", func(s clusterset.Snapshot) bool { return len(endpointsOf(s, "demo/echo", "east")) == 3 })
	tr.Update(time.Now(), true, func(w shard.Writer) {
		must(w.SetEndpoints("demo/echo", testEndpoints("demo", "echo", 2, 1)))
	})
	await(t, h.reg, "delta", func(s clusterset.Snapshot) bool { return len(endpointsOf(s, "demo/echo", "east")) == 2 })

	got := h.received()
	if len(got) != 2 || !got[0].GetFull() || got[1].GetFull() {
		t.Fatalf("want one full update then one delta, got %d updates", len(got))
	}
	if n := len(got[1].GetRemovedEndpoints()); n != 1 || len(got[1].GetEndpoints()) != 0 || len(got[1].GetServices()) != 0 {
		t.Errorf("delta carries %d removals, %d endpoints, %d services; want only the one removal",
			n, len(got[1].GetEndpoints()), len(got[1].GetServices()))
	}
	testwait.For(t, "ack of version 2", func() bool { return ackedVersion(tr) == 2 })
}

// rawStream opens a Sync stream and completes the Hello/Welcome exchange.
func rawStream(t *testing.T, h *memHub, hello *federationpb.Hello) (federationpb.Federation_SyncClient, *federationpb.Welcome) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	s, err := h.client.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	m, err := recvReply(s)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetWelcome() == nil {
		t.Fatalf("first hub message is %v, want welcome", m)
	}
	return s, m.GetWelcome()
}

func sendUpdate(t *testing.T, s federationpb.Federation_SyncClient, u *federationpb.ShardUpdate) *federationpb.HubMessage {
	t.Helper()
	if err := s.Send(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: u}}); err != nil {
		t.Fatal(err)
	}
	m, err := recvReply(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// recvReply returns the hub's next message that answers the spoke, passing
// over the membership announcements the hub sends whenever it likes.
func recvReply(s federationpb.Federation_SyncClient) (*federationpb.HubMessage, error) {
	for {
		m, err := s.Recv()
		if err != nil || m.GetMembers() == nil {
			return m, err
		}
	}
}

func TestSyncNackKeepsLastGoodShard(t *testing.T) {
	h := newMemHub(t, registry.Limits{MaxEndpoints: 3}, 4<<20)
	s, _ := rawStream(t, h, &federationpb.Hello{ClusterId: "east", Session: "s1"})
	full := &federationpb.ShardUpdate{
		Version: 1, Nonce: "a", Full: true, Cluster: testCluster("east", "n1"),
		Services:  []*federationpb.Service{testService("demo", "echo")},
		Endpoints: testEndpoints("demo", "echo", 2, 1),
	}
	if m := sendUpdate(t, s, full); m.GetAck().GetVersion() != 1 || m.GetAck().GetNonce() != "a" {
		t.Fatalf("full update: got %v, want ack of version 1", m)
	}
	good := h.reg.Current()

	bad := testEndpoints("demo", "echo", 1, 100)[0]
	bad.Ports[0].Port = 70000
	tests := []struct {
		name   string
		update *federationpb.ShardUpdate
		code   federationpb.NackCode
		reason []string // substrings of the reason
		object string
		field  string
	}{
		{
			name:   "invalid port",
			update: &federationpb.ShardUpdate{Version: 2, Nonce: "b", Endpoints: []*federationpb.Endpoint{bad}},
			code:   federationpb.NackCode_NACK_CODE_INVALID,
			reason: []string{`cluster "east"`, "endpoint demo/echo/10.0.0.100", "ports[0].port", "70000"},
			object: "endpoint demo/echo/10.0.0.100", field: "ports[0].port",
		},
		{
			name: "hostname outside the service's namespace",
			update: &federationpb.ShardUpdate{Version: 3, Nonce: "c", Services: []*federationpb.Service{func() *federationpb.Service {
				s := testService("demo", "evil")
				s.Hostname = "google.com"
				return s
			}()}},
			code:   federationpb.NackCode_NACK_CODE_INVALID,
			reason: []string{"service demo/evil", "hostname"},
			object: "service demo/evil", field: "hostname",
		},
		{
			name:   "another cluster's facts",
			update: &federationpb.ShardUpdate{Version: 4, Nonce: "d", Cluster: testCluster("west", "n1")},
			code:   federationpb.NackCode_NACK_CODE_INVALID,
			reason: []string{`cluster "east"`, "west"},
			object: "cluster west", field: "id",
		},
		{
			name:   "over the endpoint cap",
			update: &federationpb.ShardUpdate{Version: 5, Nonce: "e", Endpoints: testEndpoints("demo", "echo", 2, 50)},
			code:   federationpb.NackCode_NACK_CODE_OVER_LIMIT,
			reason: []string{"4 endpoints exceed the hub's cap of 3"},
		},
		{
			name:   "stale version",
			update: &federationpb.ShardUpdate{Version: 1, Nonce: "f", Endpoints: testEndpoints("demo", "echo", 1, 60)},
			code:   federationpb.NackCode_NACK_CODE_STALE_VERSION,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := sendUpdate(t, s, tc.update)
			n := m.GetNack()
			if n == nil {
				t.Fatalf("got %v, want a nack", m)
			}
			if n.GetCode() != tc.code || n.GetVersion() != tc.update.GetVersion() || n.GetNonce() != tc.update.GetNonce() {
				t.Errorf("nack = %v, want code %v for version %d", n, tc.code, tc.update.GetVersion())
			}
			for _, want := range tc.reason {
				if !strings.Contains(n.GetReason(), want) {
					t.Errorf("reason %q does not mention %q", n.GetReason(), want)
				}
			}
			if n.GetObject() != tc.object || n.GetField() != tc.field {
				t.Errorf("nack names object %q field %q, want %q %q", n.GetObject(), n.GetField(), tc.object, tc.field)
			}
			if cur := h.reg.Current(); cur.Revision() != good.Revision() {
				t.Errorf("the registry moved from revision %d to %d after a rejected update", good.Revision(), cur.Revision())
			}
		})
	}
	// The stream still works after the Nacks.
	ok := &federationpb.ShardUpdate{Version: 6, Nonce: "g", RemovedEndpoints: []string{"demo/echo/10.0.0.1"}}
	if m := sendUpdate(t, s, ok); m.GetAck().GetVersion() != 6 {
		t.Fatalf("got %v, want ack of version 6", m)
	}
	if got := endpointsOf(h.reg.Current(), "demo/echo", "east"); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Errorf("endpoints = %v, want [10.0.0.2]", got)
	}
	if st := h.reg.Status(); len(st) != 1 || st[0].Nacks != 5 {
		t.Errorf("status = %+v, want 5 nacks recorded", st)
	}
}

func TestSyncDeltaWithoutBaseIsRefused(t *testing.T) {
	h := newMemHub(t, registry.Limits{}, 4<<20)
	s, w := rawStream(t, h, &federationpb.Hello{ClusterId: "east", Session: "s1", AckedVersion: 4, SentVersion: 5})
	if w.GetResume() {
		t.Fatal("a hub without the session offered to resume")
	}
	m := sendUpdate(t, s, &federationpb.ShardUpdate{Version: 6, Nonce: "x", Endpoints: testEndpoints("demo", "echo", 1, 1)})
	if m.GetNack().GetCode() != federationpb.NackCode_NACK_CODE_NO_BASE {
		t.Fatalf("got %v, want a NO_BASE nack", m)
	}
}

func TestSyncReconnectResumes(t *testing.T) {
	h := newMemHub(t, registry.Limits{}, 4<<20)
	tr := newTracker()
	fill(tr, "east", "n1", 50)
	d := &killableDialer{client: h.client}
	u := runUplink(t, "east", tr, d.dial)
	await(t, h.reg, "initial sync", func(s clusterset.Snapshot) bool { return len(endpointsOf(s, "demo/echo", "east")) == 50 })
	testwait.For(t, "ack of the full state", func() bool { return ackedVersion(tr) == 1 })

	d.kill()
	// The kill is seen when the uplink counts a reconnect; a change made
	// before that could still leave on the old stream.
	testwait.For(t, "the uplink to reconnect", func() bool { return u.Status().Reconnects > 0 })
	// A change made meanwhile travels as a delta after the resume.
	tr.Update(time.Now(), true, func(w shard.Writer) {
		must(w.SetEndpoints("demo/echo", testEndpoints("demo", "echo", 49, 1)))
	})
	await(t, h.reg, "the change after reconnecting", func(s clusterset.Snapshot) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == 49
	})
	st := u.Status()
	if st.Reconnects == 0 || !st.Resumed {
		t.Errorf("uplink status %+v: want a reconnect that resumed", st)
	}
	if fulls := h.fullChunks(); fulls != 1 {
		t.Errorf("the hub received %d chunks of full updates, want 1 (the resume sends a delta)", fulls)
	}
}

// TestSyncRestartedSpokeDoesNotFlap restarts a spoke (new session, so the
// hub cannot resume it): the full state it resends must not remove and
// re-add anything the hub already had.
func TestSyncRestartedSpokeDoesNotFlap(t *testing.T) {
	h := newMemHub(t, registry.Limits{}, 4<<20)
	first := newTracker()
	fill(first, "east", "n1", 20)
	d1 := &killableDialer{client: h.client}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	u1 := newUplink(t, "east", first, d1.dial)
	go func() {
		defer close(done)
		_ = u1.Run(ctx)
	}()
	before := await(t, h.reg, "first spoke's sync", func(s clusterset.Snapshot) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == 20
	})
	cancel()
	<-done

	second := newTracker()
	fill(second, "east", "n1", 20)
	runUplink(t, "east", second, (&killableDialer{client: h.client}).dial)
	testwait.For(t, "the restarted spoke's full state to be acked", func() bool { return ackedVersion(second) == 1 })

	for s := before; s != nil; s = s.Next() {
		if n := len(endpointsOf(s, "demo/echo", "east")); n != 20 {
			t.Fatalf("revision %d shows %d endpoints of demo/echo in east, want 20 throughout", s.Revision(), n)
		}
		if len(s.Changes().Services) > 0 && s != before {
			t.Errorf("revision %d changed services %v; an identical full state should change none", s.Revision(), s.Changes().Services)
		}
	}
	if got := h.received(); !got[len(got)-1].GetFull() {
		t.Errorf("the restarted spoke sent a delta; want its full state")
	}
}

func TestSyncChunkedInitialSync(t *testing.T) {
	const maxBytes = 64 << 10
	h := newMemHub(t, registry.Limits{}, maxBytes)
	tr := newTracker()
	fill(tr, "east", "n1", 5000)
	runUplink(t, "east", tr, (&killableDialer{client: h.client}).dial)
	await(t, h.reg, "chunked sync", func(s clusterset.Snapshot) bool { return len(endpointsOf(s, "demo/echo", "east")) == 5000 })

	chunks := h.received()
	if len(chunks) < 3 {
		t.Fatalf("the full state arrived in %d messages, want several below %d bytes", len(chunks), maxBytes)
	}
	for i, c := range chunks {
		if c.GetVersion() != 1 || !c.GetFull() || c.GetMore() != (i < len(chunks)-1) {
			t.Errorf("chunk %d: version %d full %t more %t", i, c.GetVersion(), c.GetFull(), c.GetMore())
		}
	}
}

func TestSyncSecondStreamReplacesFirst(t *testing.T) {
	h := newMemHub(t, registry.Limits{}, 4<<20)
	old, _ := rawStream(t, h, &federationpb.Hello{ClusterId: "east", Session: "s1"})
	newer, _ := rawStream(t, h, &federationpb.Hello{ClusterId: "east", Session: "s2"})

	if _, err := recvReply(old); status.Code(err) != codes.Aborted {
		t.Fatalf("the replaced stream ended with %v, want Aborted", err)
	}
	full := &federationpb.ShardUpdate{Version: 1, Nonce: "a", Full: true, Cluster: testCluster("east", "n1")}
	if m := sendUpdate(t, newer, full); m.GetAck() == nil {
		t.Fatalf("the newer stream got %v, want an ack", m)
	}
	st := h.reg.Status()
	if len(st) != 1 || !st[0].Connected || st[0].Session != "s2" {
		t.Errorf("status = %+v, want east connected with session s2", st)
	}
}
