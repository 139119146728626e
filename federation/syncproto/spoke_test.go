package syncproto

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/testwait"
)

type sessionResult struct {
	welcomed bool
	err      error
}

// spokeTest is one spoke session against a hub the test plays.
type spokeTest struct {
	cfg    SpokeConfig
	clock  *testingclock.FakeClock
	shard  *fakeShard
	events *spokeEvents
	dial   *dialer
	done   chan sessionResult
}

func startSpokeSession(t *testing.T, buffer int, edits ...func(*SpokeConfig)) *spokeTest {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	st := &spokeTest{
		cfg: SpokeConfig{
			ClusterID: "east", Build: "test", MaxMessageBytes: 1 << 20,
			WelcomeTimeout: 10 * time.Second, AckTimeout: time.Minute,
			NackBackoff: time.Second, MaxNackBackoff: 30 * time.Second, Clock: clk,
		},
		clock: clk, shard: newFakeShard(clk), events: newSpokeEvents(), dial: newDialer(buffer),
		done: make(chan sessionResult, 1),
	}
	for _, edit := range edits {
		edit(&st.cfg)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		welcomed, err := NewSpoke(st.cfg, st.shard, st.events).Session(ctx, st.dial.dial)
		st.done <- sessionResult{welcomed, err}
	}()
	t.Cleanup(func() {
		cancel()
		<-st.done
	})
	return st
}

// welcome answers the session's Hello.
func (st *spokeTest) welcome(t *testing.T, w *federationpb.Welcome) hubEnd {
	t.Helper()
	h := st.dial.next(t)
	if hello := h.expect(t).GetHello(); hello.GetClusterId() != "east" || hello.GetBuild() != "test" || hello.GetSession() != "s1" {
		t.Fatalf("hello %v", hello)
	}
	if err := h.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Welcome{Welcome: w}}); err != nil {
		t.Fatal(err)
	}
	<-st.events.welcomed
	return h
}

func (st *spokeTest) result(t *testing.T) sessionResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	select {
	case r := <-st.done:
		st.done <- r // for the cleanup
		return r
	case <-ctx.Done():
		t.Fatal("the session did not end")
		return sessionResult{}
	}
}

// armed waits until n timers of the session's wait on the clock.
func (st *spokeTest) armed(t *testing.T, n int) {
	t.Helper()
	testwait.For(t, "the session's timers", func() bool { return st.clock.Waiters() == n })
}

func ack(v uint64) *federationpb.HubMessage {
	return &federationpb.HubMessage{Kind: &federationpb.HubMessage_Ack{Ack: &federationpb.Ack{Version: v}}}
}

func nack(v uint64, code federationpb.NackCode) *federationpb.HubMessage {
	return &federationpb.HubMessage{Kind: &federationpb.HubMessage_Nack{Nack: &federationpb.Nack{Version: v, Code: code, Reason: "no"}}}
}

func TestSyncSpokeWelcomeTimeout(t *testing.T) {
	st := startSpokeSession(t, 8)
	h := st.dial.next(t)
	h.expect(t) // Hello
	st.clock.Step(st.cfg.WelcomeTimeout)
	if r := st.result(t); r.welcomed || !errors.Is(r.err, ErrWelcomeTimeout) {
		t.Fatalf("session ended with %+v, want ErrWelcomeTimeout before a welcome", r)
	}
}

func TestSyncSpokeFirstMessageMustBeWelcome(t *testing.T) {
	st := startSpokeSession(t, 8)
	h := st.dial.next(t)
	h.expect(t)
	if err := h.Send(ack(1)); err != nil {
		t.Fatal(err)
	}
	if r := st.result(t); r.welcomed || !errors.Is(r.err, ErrNoWelcome) {
		t.Fatalf("session ended with %+v, want ErrNoWelcome", r)
	}
}

// TestSyncSpokeClusterset: the spoke names its clusterset in its Hello
// and leaves a hub that serves another.
func TestSyncSpokeClusterset(t *testing.T) {
	st := startSpokeSession(t, 8, func(c *SpokeConfig) { c.Clusterset = "prod" })
	h := st.dial.next(t)
	if hello := h.expect(t).GetHello(); hello.GetClusterset() != "prod" {
		t.Fatalf("hello %v, want clusterset prod", hello)
	}
	if err := h.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Welcome{Welcome: &federationpb.Welcome{HubId: "hub-0", Clusterset: "staging"}}}); err != nil {
		t.Fatal(err)
	}
	if r := st.result(t); r.welcomed || !errors.Is(r.err, ErrOtherClusterset) || !strings.Contains(r.err.Error(), `serves clusterset "staging"`) {
		t.Fatalf("session ended with %+v, want ErrOtherClusterset naming the hub's", r)
	}
}

func TestSyncSpokeSendsChunksAndTakesAcks(t *testing.T) {
	st := startSpokeSession(t, 8)
	h := st.welcome(t, &federationpb.Welcome{Resume: true, Limits: &federationpb.Limits{MaxMessageBytes: 64 << 10}})
	st.shard.push(1, true, []string{"10.0.0.1"}, []string{"10.0.0.2"})
	first, second := h.expect(t).GetUpdate(), h.expect(t).GetUpdate()
	if first.GetVersion() != 1 || !first.GetMore() || second.GetMore() || first.GetNonce() == "" || first.GetNonce() != second.GetNonce() {
		t.Fatalf("chunks %v and %v, want version 1 in two chunks of one nonce", first, second)
	}
	if err := h.Send(ack(1)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the ack of the full state", func() bool {
		st.events.mu.Lock()
		defer st.events.mu.Unlock()
		return st.events.fulls == 1
	})
	st.shard.mu.Lock()
	defer st.shard.mu.Unlock()
	if st.shard.maxBytes != 64<<10 || len(st.shard.reconnected) != 1 || !st.shard.reconnected[0] {
		t.Errorf("the shard was asked with limit %d after reconnects %v, want the hub's 64 KiB after one resume", st.shard.maxBytes, st.shard.reconnected)
	}
}

// TestSyncSpokeAckTimeout: an update the hub does not answer ends the session,
// so that the spoke reconnects and resumes from what the hub has.
func TestSyncSpokeAckTimeout(t *testing.T) {
	tests := []struct {
		name   string
		buffer int
		hub    func(t *testing.T, h hubEnd)
	}{
		{"answer lost", 8, func(t *testing.T, h hubEnd) {
			t.Helper()
			h.expect(t)
		}},
		{"answer to another version", 8, func(t *testing.T, h hubEnd) {
			t.Helper()
			h.expect(t)
			if err := h.Send(ack(7)); err != nil {
				t.Fatal(err)
			}
		}},
		{"hub stopped reading", 0, func(*testing.T, hubEnd) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := startSpokeSession(t, tc.buffer)
			h := st.welcome(t, &federationpb.Welcome{})
			st.shard.push(1, true, []string{"10.0.0.1"})
			tc.hub(t, h)
			st.armed(t, 1)
			st.clock.Step(st.cfg.AckTimeout)
			if r := st.result(t); !r.welcomed || !errors.Is(r.err, ErrAckTimeout) {
				t.Fatalf("session ended with %+v, want ErrAckTimeout", r)
			}
		})
	}
}

// TestSyncSpokeNackBackoff: after a Nack, the next update waits for a backoff
// that doubles with each Nack; NO_BASE asks for the full state at once.
func TestSyncSpokeNackBackoff(t *testing.T) {
	st := startSpokeSession(t, 8)
	h := st.welcome(t, &federationpb.Welcome{})
	// nacked answers the update in flight with a Nack, queues the next
	// one, and returns when the session asked for it, by the clock.
	nacked := func(version uint64, wait time.Duration) time.Time {
		t.Helper()
		if u := h.expect(t).GetUpdate(); u.GetVersion() != version {
			t.Fatalf("got version %d, want %d", u.GetVersion(), version)
		}
		if err := h.Send(nack(version, federationpb.NackCode_NACK_CODE_INVALID)); err != nil {
			t.Fatal(err)
		}
		<-st.events.nacked
		st.shard.mu.Lock()
		from := len(st.shard.nexts)
		st.shard.mu.Unlock()
		st.shard.push(version+1, true, []string{"10.0.0.1"})
		st.armed(t, 1) // the backoff
		for range wait / time.Second {
			st.clock.Step(time.Second)
		}
		testwait.For(t, "the next update", func() bool {
			st.shard.mu.Lock()
			defer st.shard.mu.Unlock()
			return len(st.shard.nexts) > from
		})
		st.shard.mu.Lock()
		defer st.shard.mu.Unlock()
		return st.shard.nexts[from]
	}
	start := st.clock.Now()
	st.shard.push(1, true, []string{"10.0.0.1"})
	if at := nacked(1, time.Second); at.Before(start.Add(time.Second)) {
		t.Errorf("asked for the update after a Nack at %v, before the backoff of 1s", at.Sub(start))
	}
	start = st.clock.Now()
	if at := nacked(2, 2*time.Second); at.Before(start.Add(2 * time.Second)) {
		t.Errorf("asked for the update after a second Nack at %v, before the backoff of 2s", at.Sub(start))
	}

	// NO_BASE: the full state leaves without a wait.
	if u := h.expect(t).GetUpdate(); u.GetVersion() != 3 {
		t.Fatalf("got version %d, want 3", u.GetVersion())
	}
	st.shard.push(4, true, []string{"10.0.0.1"})
	if err := h.Send(nack(3, federationpb.NackCode_NACK_CODE_NO_BASE)); err != nil {
		t.Fatal(err)
	}
	if u := h.expect(t).GetUpdate(); u.GetVersion() != 4 {
		t.Fatalf("after NO_BASE got version %d, want 4", u.GetVersion())
	}
}
