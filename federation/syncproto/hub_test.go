package syncproto

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

var errNoBase = errors.New("no base")

func testHub(conn *fakeConn) *Hub {
	return NewHub(HubConfig{
		MaxMessageBytes: 1 << 20, HubID: "hub-0", Limits: Limits{MaxServices: 10, MaxEndpoints: 20, MaxWorkloads: 30},
		NackCode: func(err error) federationpb.NackCode {
			if errors.Is(err, errNoBase) {
				return federationpb.NackCode_NACK_CODE_NO_BASE
			}
			return federationpb.NackCode_NACK_CODE_UNSPECIFIED
		},
	}, conn.connector())
}

// hubSessionTest is one hub session against a spoke the test plays.
type hubSessionTest struct {
	spoke  spokeEnd
	events *hubEvents
	done   chan error
}

// serve runs one session of h on a new stream, which ends when the
// session returns, as a gRPC stream ends with its handler.
func serve(t *testing.T, h *Hub, bound federation.ClusterID) *hubSessionTest {
	t.Helper()
	p := newPipe(8)
	s := &hubSessionTest{spoke: spokeEnd{p}, events: &hubEvents{}, done: make(chan error, 1)}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		err := h.Serve(t.Context(), hubEnd{p}, bound, s.events)
		p.close()
		s.done <- err
	}()
	t.Cleanup(func() {
		p.close()
		<-finished
	})
	return s
}

func (s *hubSessionTest) send(t *testing.T, m *federationpb.SpokeMessage) {
	t.Helper()
	if err := s.spoke.Send(m); err != nil {
		t.Fatal(err)
	}
}

func (s *hubSessionTest) hello(t *testing.T, h *federationpb.Hello) *federationpb.Welcome {
	t.Helper()
	s.send(t, &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: h}})
	w := s.spoke.expect(t).GetWelcome()
	if w == nil {
		t.Fatal("no welcome")
	}
	return w
}

func (s *hubSessionTest) update(t *testing.T, u *federationpb.ShardUpdate) {
	t.Helper()
	s.send(t, &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: u}})
}

func (s *hubSessionTest) result(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	select {
	case err := <-s.done:
		return err
	case <-ctx.Done():
		t.Fatal("the session did not end")
		return nil
	}
}

func TestSyncHubRefusesStreams(t *testing.T) {
	update := &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: &federationpb.ShardUpdate{Version: 1}}}
	tests := []struct {
		name       string
		bound      federation.ClusterID
		first      *federationpb.SpokeMessage
		check      func(error) bool
		msg        string
		clusterset string // the hub's
	}{
		{"no hello", "", update, func(err error) bool { return errors.Is(err, ErrBadHello) }, "the first message of a stream must be Hello", ""},
		{
			"a newer protocol", "", &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: "east", Build: "v9", ProtocolVersion: ProtocolVersion + 1}}},
			func(err error) bool { return errors.Is(err, ErrProtocolVersion) },
			fmt.Sprintf(`cluster "east": the spoke (build "v9") speaks sync protocol version %d; this hub (build "") speaks %d to %d: upgrade hubs before spokes`, ProtocolVersion+1, MinProtocolVersion, ProtocolVersion), "",
		},
		{
			"invalid cluster", "", &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: "East_1"}}},
			func(err error) bool { return errors.Is(err, ErrBadHello) && errors.Is(err, federation.ErrInvalid) }, "hello: ", "",
		},
		{
			"another cluster than the credential's", "west", &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: "east"}}},
			func(err error) bool {
				var m *ClusterMismatchError
				return errors.As(err, &m) && m.Bound == "west" && m.Claimed == "east"
			},
			`this credential is bound to cluster "west"; it cannot publish cluster "east"`, "",
		},
		{
			"another clusterset", "", &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: "east", Clusterset: "staging"}}},
			func(err error) bool { return errors.Is(err, ErrOtherClusterset) },
			`cluster "east" is a member of clusterset "staging" (its ClusterProperty clusterset.k8s.io); this hub serves clusterset "prod" (--clusterset)`, "prod",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := newFakeConn()
			connects := 0
			h := NewHub(HubConfig{Clusterset: tc.clusterset}, func(context.Context, federation.ClusterID, *federationpb.Hello) (Conn, error) {
				connects++
				return conn, nil
			})
			s := serve(t, h, tc.bound)
			s.send(t, tc.first)
			err := s.result(t)
			if !tc.check(err) || len(err.Error()) < len(tc.msg) || err.Error()[:len(tc.msg)] != tc.msg {
				t.Errorf("Serve() = %v, want an error saying %q", err, tc.msg)
			}
			if connects != 0 {
				t.Error("a refused stream took the cluster's shard")
			}
		})
	}
}

func TestSyncHubWelcome(t *testing.T) {
	conn := newFakeConn()
	conn.session, conn.version = "s1", 5
	h := testHub(conn)
	for _, tc := range []struct {
		hello   *federationpb.Hello
		resume  bool
		version uint64
		why     string
	}{
		{&federationpb.Hello{ClusterId: "east", Session: "s1", AckedVersion: 4, SentVersion: 6}, true, 5, "the hub holds a version between acked and sent"},
		{&federationpb.Hello{ClusterId: "east", Session: "s1", AckedVersion: 6, SentVersion: 7}, false, 0, "the hub lost what the spoke had acked"},
		{&federationpb.Hello{ClusterId: "east", Session: "s2", AckedVersion: 4, SentVersion: 6}, false, 0, "another session"},
	} {
		s := serve(t, h, "")
		w := s.hello(t, tc.hello)
		want := &federationpb.Welcome{
			Resume: tc.resume, Version: tc.version, HubId: "hub-0", ProtocolVersion: ProtocolVersion,
			Limits: &federationpb.Limits{MaxMessageBytes: 1 << 20, MaxServices: 10, MaxEndpoints: 20, MaxWorkloads: 30},
		}
		if !proto.Equal(w, want) {
			t.Errorf("%s: welcome %v, want %v", tc.why, w, want)
		}
	}
}

func TestSyncHubAnswersUpdates(t *testing.T) {
	tests := []struct {
		name     string
		applyErr error
		code     federationpb.NackCode
		object   string
		field    string
	}{
		{"applied", nil, 0, "", ""},
		{
			"invalid", fmt.Errorf("cluster %q: %w", "east", &federation.ValidationError{Kind: "endpoint", Key: "demo/echo/10.0.0.1", Field: "ports[0].port", Reason: "out of range"}),
			federationpb.NackCode_NACK_CODE_INVALID, "endpoint demo/echo/10.0.0.1", "ports[0].port",
		},
		{"over limit", fmt.Errorf("too many: %w", federation.ErrOverLimit), federationpb.NackCode_NACK_CODE_OVER_LIMIT, "", ""},
		{"the registry's own", fmt.Errorf("delta: %w", errNoBase), federationpb.NackCode_NACK_CODE_NO_BASE, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := newFakeConn()
			conn.applyErr = tc.applyErr
			s := serve(t, testHub(conn), "")
			s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1"})
			s.update(t, &federationpb.ShardUpdate{Version: 1, Nonce: "n1", Full: true, Cluster: &federationpb.Cluster{Id: "east"}})
			m := s.spoke.expect(t)
			if tc.applyErr == nil {
				if a := m.GetAck(); a.GetVersion() != 1 || a.GetNonce() != "n1" {
					t.Fatalf("got %v, want the ack of version 1", m)
				}
				return
			}
			n := m.GetNack()
			if n.GetVersion() != 1 || n.GetNonce() != "n1" || n.GetCode() != tc.code || n.GetReason() != tc.applyErr.Error() ||
				n.GetObject() != tc.object || n.GetField() != tc.field {
				t.Fatalf("got %v, want a %v nack naming %q %q", m, tc.code, tc.object, tc.field)
			}
			conn.mu.Lock()
			defer conn.mu.Unlock()
			if len(conn.nacks) != 1 || conn.nacks[0] != tc.applyErr.Error() {
				t.Errorf("the registry recorded nacks %q", conn.nacks)
			}
		})
	}
}

// TestSyncHubResetsStream: an error the registry gives no code for, and
// chunks out of order, end the stream; the spoke reconnects and resends.
func TestSyncHubResetsStream(t *testing.T) {
	chunk := func(v uint64, more bool) *federationpb.ShardUpdate {
		return &federationpb.ShardUpdate{Version: v, Nonce: fmt.Sprint("n", v), More: more}
	}
	tests := []struct {
		name     string
		applyErr error
		updates  []*federationpb.ShardUpdate
		reason   string
	}{
		{"unclassified error", errors.New("disk on fire"), []*federationpb.ShardUpdate{chunk(1, false)}, "disk on fire"},
		{"interleaved versions", nil, []*federationpb.ShardUpdate{chunk(1, true), chunk(2, false)}, "version 1 ended without its last chunk (version 2 began)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := newFakeConn()
			conn.applyErr = tc.applyErr
			s := serve(t, testHub(conn), "")
			s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1"})
			for _, u := range tc.updates {
				s.update(t, u)
			}
			if err := s.result(t); !errors.Is(err, ErrReset) || err.Error() != tc.reason {
				t.Fatalf("Serve() = %v, want a reset saying %q", err, tc.reason)
			}
			conn.mu.Lock()
			defer conn.mu.Unlock()
			if len(conn.nacks) != 1 || !conn.closed {
				t.Errorf("nacks %q, closed %v: want the reset recorded and the shard released", conn.nacks, conn.closed)
			}
		})
	}
}

func TestSyncHubSessionEnds(t *testing.T) {
	t.Run("superseded", func(t *testing.T) {
		conn := newFakeConn()
		s := serve(t, testHub(conn), "")
		s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1"})
		close(conn.superseded)
		if err := s.result(t); !errors.Is(err, ErrSuperseded) {
			t.Fatalf("Serve() = %v, want ErrSuperseded", err)
		}
	})
	t.Run("spoke gone", func(t *testing.T) {
		conn := newFakeConn()
		s := serve(t, testHub(conn), "")
		s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1"})
		s.spoke.close()
		if err := s.result(t); !errors.Is(err, ErrSpokeGone) {
			t.Fatalf("Serve() = %v, want ErrSpokeGone", err)
		}
	})
}

// TestSyncHubDistrustsIncompleteUpdate: a chunk that arrives after its
// update's last chunk shows the hub applied that update without it. The
// stream is reset and the session is not resumed until a full state
// replaced the shard.
func TestSyncHubDistrustsIncompleteUpdate(t *testing.T) {
	conn := newFakeConn()
	h := testHub(conn)
	s := serve(t, h, "")
	s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1"})
	s.update(t, &federationpb.ShardUpdate{Version: 1, Nonce: "a", Full: true, Cluster: &federationpb.Cluster{Id: "east"}})
	s.spoke.expect(t)
	s.update(t, &federationpb.ShardUpdate{Version: 2, Nonce: "b"}) // the last chunk, first
	if a := s.spoke.expect(t).GetAck(); a.GetVersion() != 2 {
		t.Fatalf("got %v, want the ack of version 2", a)
	}
	s.update(t, &federationpb.ShardUpdate{Version: 2, Nonce: "b", More: true})
	if err := s.result(t); !errors.Is(err, ErrReset) {
		t.Fatalf("Serve() = %v, want a reset", err)
	}

	resumable := &federationpb.Hello{ClusterId: "east", Session: "s1", AckedVersion: 2, SentVersion: 2}
	s = serve(t, h, "")
	if w := s.hello(t, resumable); w.GetResume() {
		t.Fatal("the hub resumed a session whose shard it may hold incomplete")
	}
	s.update(t, &federationpb.ShardUpdate{Version: 3, Nonce: "c", Full: true, Cluster: &federationpb.Cluster{Id: "east"}})
	s.spoke.expect(t)
	resumable.AckedVersion, resumable.SentVersion = 3, 3
	if w := serve(t, h, "").hello(t, resumable); !w.GetResume() {
		t.Error("the hub did not resume the session after its full state")
	}
}

// TestSyncHubStrayChunkOfRejectedUpdate: a chunk after the last chunk of an
// update the hub rejected ends the stream, so that the spoke resends at
// once; the hub's shard is its last good one, so it still resumes.
func TestSyncHubStrayChunkOfRejectedUpdate(t *testing.T) {
	conn := newFakeConn()
	h := testHub(conn)
	s := serve(t, h, "")
	s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1"})
	s.update(t, &federationpb.ShardUpdate{Version: 1, Nonce: "a", Full: true, Cluster: &federationpb.Cluster{Id: "east"}})
	s.spoke.expect(t)
	conn.mu.Lock()
	conn.applyErr = &federation.ValidationError{Kind: "update", Field: "cluster", Reason: "required in a full update"}
	conn.mu.Unlock()
	s.update(t, &federationpb.ShardUpdate{Version: 2, Nonce: "b", Full: true}) // the last chunk, first
	if n := s.spoke.expect(t).GetNack(); n.GetVersion() != 2 {
		t.Fatalf("got %v, want the nack of version 2", n)
	}
	s.update(t, &federationpb.ShardUpdate{Version: 2, Nonce: "b", Full: true, More: true, Cluster: &federationpb.Cluster{Id: "east"}})
	if err := s.result(t); !errors.Is(err, ErrReset) {
		t.Fatalf("Serve() = %v, want a reset", err)
	}
	if w := serve(t, h, "").hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1", AckedVersion: 1, SentVersion: 2}); !w.GetResume() {
		t.Error("the hub did not resume a session whose shard it holds whole")
	}
}

// TestSyncHubReadsObservedTimesInItsClock: a spoke whose clock is an hour
// behind the hub's; the hub reads the observed time of its updates in its
// own clock, late by at most the stream's shortest one-way delay.
func TestSyncHubReadsObservedTimesInItsClock(t *testing.T) {
	hubNow := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	conn := newFakeConn()
	h := testHub(conn)
	h.cfg.Now = func() time.Time { return hubNow }
	s := serve(t, h, "")
	s.hello(t, &federationpb.Hello{ClusterId: "east", Session: "s1"})
	spokeClock := hubNow.Add(-time.Hour)
	// Two chunks of one update, the first 30 ms on the way, the second 5.
	s.update(t, &federationpb.ShardUpdate{
		Version: 1, Nonce: "n1", Full: true, More: true, Cluster: &federationpb.Cluster{Id: "east"},
		ObservedTime: timestamppb.New(spokeClock.Add(-100 * time.Millisecond)), SentTime: timestamppb.New(spokeClock.Add(-30 * time.Millisecond)),
	})
	s.update(t, &federationpb.ShardUpdate{
		Version: 1, Nonce: "n1", Full: true, SentTime: timestamppb.New(spokeClock.Add(-5 * time.Millisecond)),
		Services: []*federationpb.Service{{Namespace: "demo", Name: "echo"}},
	})
	if a := s.spoke.expect(t).GetAck(); a.GetVersion() != 1 {
		t.Fatalf("got %v, want the ack", a)
	}
	conn.mu.Lock()
	defer conn.mu.Unlock()
	// Observed 100 ms before "now" by the spoke's clock; the offset is
	// estimated as 1h + 5ms (the faster chunk's delay), so the hub reads
	// it as 95 ms ago.
	if got, want := conn.applied[0].GetObservedTime().AsTime(), hubNow.Add(-95*time.Millisecond); !got.Equal(want) {
		t.Errorf("observed time %v in the hub's clock, want %v", got, want)
	}
}
