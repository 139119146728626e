package uplink

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStream is a client stream in memory that ends with its dial's
// context; the test plays the hub at its other end.
type memStream struct {
	ctx   context.Context
	close context.CancelFunc
	up    chan *federationpb.SpokeMessage
	down  chan *federationpb.HubMessage
}

func (s *memStream) Send(m *federationpb.SpokeMessage) error {
	select {
	case s.up <- m:
		return nil
	case <-s.ctx.Done():
		return io.EOF
	}
}

func (s *memStream) Recv() (*federationpb.HubMessage, error) {
	select {
	case m := <-s.down:
		return m, nil
	case <-s.ctx.Done():
		return nil, io.EOF
	}
}

func (s *memStream) expect(t *testing.T) *federationpb.SpokeMessage {
	t.Helper()
	select {
	case m := <-s.up:
		return m
	case <-s.ctx.Done():
		t.Fatal("the stream ended")
	}
	return nil
}

func (s *memStream) answer(m *federationpb.HubMessage) { s.down <- m }

// dialer fails the dials a test asks it to, and hands the test the other
// end of the streams it opens.
type dialer struct {
	mu      sync.Mutex
	fail    int // dials left to fail
	streams chan *memStream
}

var errRefused = errors.New("connection refused")

func (d *dialer) dial(ctx context.Context) (Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail > 0 {
		d.fail--
		return nil, errRefused
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &memStream{ctx: ctx, close: cancel, up: make(chan *federationpb.SpokeMessage, 8), down: make(chan *federationpb.HubMessage, 8)}
	d.streams <- s
	return s, nil
}

func (d *dialer) next(t *testing.T) *memStream {
	t.Helper()
	select {
	case s := <-d.streams:
		return s
	case <-t.Context().Done():
		t.Fatal("no stream dialed")
		return nil
	}
}

// recordingClock is a fake clock that reports the wait of every timer.
type recordingClock struct {
	*testingclock.FakeClock
	waits chan time.Duration
}

func (c *recordingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.waits <- d
	return t
}

// reconnect returns the wait before the next reconnect and lets it pass.
func (c *recordingClock) reconnect(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.waits:
		c.Step(d)
		return d
	case <-t.Context().Done():
		t.Fatal("no reconnect")
		return 0
	}
}

type uplinkTest struct {
	u       *Uplink
	clock   *recordingClock
	dial    *dialer
	t       *shard.Tracker
	stream  *shard.Stream
	metrics *Metrics
	fulls   chan struct{}
}

// start runs an uplink of a tracker holding one endpoint, with the
// longest jittered waits, until the test ends.
func start(t *testing.T, failDials int) *uplinkTest {
	t.Helper()
	ut := &uplinkTest{
		clock: &recordingClock{FakeClock: testingclock.NewFakeClock(time.Unix(1000, 0)), waits: make(chan time.Duration, 8)},
		dial:  &dialer{fail: failDials, streams: make(chan *memStream, 8)},
		t:     shard.NewTracker(),
		fulls: make(chan struct{}, 8),
	}
	ut.stream = ut.t.Open()
	ut.t.Update(time.Now(), true, func(w shard.Writer) {
		w.SetCluster(&federationpb.Cluster{Id: "east"})
		if err := w.SetEndpoints("demo/echo", []*federationpb.Endpoint{{Namespace: "demo", Service: "echo", Address: "10.0.0.1"}}); err != nil {
			t.Fatal(err)
		}
	})
	ut.metrics = NewMetrics()
	cfg := Config{
		ClusterID: "east", Hub: "hub-a", Metrics: ut.metrics, MinBackoff: time.Second, MaxBackoff: time.Minute, ReconnectJitter: 300 * time.Millisecond,
		FullAcked: func() { ut.fulls <- struct{}{} },
	}
	ut.u = newUplink(cfg, ut.stream, ut.dial.dial, slog.New(slog.DiscardHandler), ut.clock, func(n int64) int64 { return n - 1 })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ut.u.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	return ut
}

func (ut *uplinkTest) eventually(t *testing.T, what string, cond func(Status) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond(ut.u.Status()) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s: status %+v", what, ut.u.Status())
		}
	}
}

// welcome answers the next stream's Hello.
func welcome(t *testing.T, s *memStream, resume bool) {
	t.Helper()
	if s.expect(t).GetHello().GetClusterId() != "east" {
		t.Fatal("the stream did not open with the cluster's hello")
	}
	s.answer(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Welcome{Welcome: &federationpb.Welcome{Resume: resume}}})
}

// failNext makes the next n dials fail.
func (d *dialer) failNext(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = n
}

// jittered is the longest wait after a failure with backoff (the test's
// jitter is the longest), MinBackoff being 1s.
func jittered(backoff time.Duration) time.Duration { return backoff - 1 + time.Second/2 }

// TestUplinkBackoff: the wait between reconnects doubles while dials fail,
// and while streams end soon after the hub welcomed them; a Welcome ends
// the dials' backoff, not the drops'.
func TestUplinkBackoff(t *testing.T) {
	ut := start(t, 3)
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if got := ut.clock.reconnect(t); got != jittered(backoff) {
			t.Errorf("wait %d: %v, want %v", i+1, got, jittered(backoff))
		}
	}
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second} {
		s := ut.dial.next(t)
		welcome(t, s, false)
		ut.eventually(t, "connected", func(st Status) bool { return st.Connected && st.Reconnects == 3+i })
		ut.clock.Step(healthySession - time.Millisecond)
		if i == 1 {
			ut.dial.failNext(1) // the dial after this stream
		}
		s.close() // the hub drops the stream soon after its welcome
		if got := ut.clock.reconnect(t); got != jittered(backoff) {
			t.Errorf("wait after stream %d dropped soon after its welcome: %v, want %v", i+1, got, jittered(backoff))
		}
	}
	if got := ut.clock.reconnect(t); got != jittered(time.Second) {
		t.Errorf("wait after a dial failed after a welcome: %v, want the first backoff %v", got, jittered(time.Second))
	}
	ut.dial.next(t)
	ut.eventually(t, "a sixth reconnect", func(st Status) bool { return st.Reconnects == 6 && !st.Connected })
}

// TestUplinkReconnectsAtOnce: when a stream that worked ends (the hub
// restarted), the spoke reconnects within the reconnect jitter, and only a
// failure after that backs off, from the start.
func TestUplinkReconnectsAtOnce(t *testing.T) {
	ut := start(t, 2)
	ut.clock.reconnect(t)
	ut.clock.reconnect(t) // the backoff is at 4s now
	s := ut.dial.next(t)
	welcome(t, s, true)
	ut.eventually(t, "connected", func(st Status) bool { return st.Connected })
	ut.clock.Step(healthySession)
	ut.dial.failNext(1)
	s.close() // the hub went away
	if got, want := ut.clock.reconnect(t), 300*time.Millisecond-1; got != want {
		t.Errorf("wait after a healthy stream ended: %v, want the reconnect jitter's longest %v", got, want)
	}
	// That dial fails: the hub is not back yet.
	if got := ut.clock.reconnect(t); got != jittered(time.Second) {
		t.Errorf("wait after the reconnect failed: %v, want the first backoff %v", got, jittered(time.Second))
	}
	welcome(t, ut.dial.next(t), true)
	ut.eventually(t, "connected again", func(st Status) bool { return st.Connected && st.Reconnects == 4 })
}

// TestReconnectJitterDefault: the reconnect after a healthy stream never
// waits longer than a failure's first backoff, nor a second.
func TestReconnectJitterDefault(t *testing.T) {
	for _, tc := range []struct{ minBackoff, want time.Duration }{
		{0, 250 * time.Millisecond},
		{10 * time.Millisecond, 10 * time.Millisecond},
		{5 * time.Second, time.Second},
	} {
		if got := (Config{MinBackoff: tc.minBackoff}).WithDefaults().ReconnectJitter; got != tc.want {
			t.Errorf("MinBackoff %v: ReconnectJitter %v, want %v", tc.minBackoff, got, tc.want)
		}
	}
	if got := (Config{ReconnectJitter: -1}).WithDefaults().ReconnectJitter; got != -1 {
		t.Errorf("a negative ReconnectJitter became %v; it means no wait", got)
	}
}

// TestUplinkStatus: what the uplink reports of its streams.
func TestUplinkStatus(t *testing.T) {
	ut := start(t, 0)
	s := ut.dial.next(t)
	welcome(t, s, true)
	m := s.expect(t)
	u := m.GetUpdate()
	if u.GetVersion() != 1 || !u.GetFull() {
		t.Fatalf("first update %v, want the full state", u)
	}
	size := int64(proto.Size(m))
	ut.eventually(t, "connected, resumed, bytes counted", func(st Status) bool {
		return st.Connected && st.Resumed && st.BytesSent == size && st.Reconnects == 0
	})
	s.answer(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Ack{Ack: &federationpb.Ack{Version: 1, Nonce: u.GetNonce()}}})
	select {
	case <-ut.fulls:
	case <-t.Context().Done():
		t.Fatal("FullAcked was not called after the ack of the full state")
	}

	ut.t.Update(time.Now(), true, func(w shard.Writer) { w.DeleteService("demo/echo") })
	u = s.expect(t).GetUpdate()
	s.answer(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Nack{Nack: &federationpb.Nack{
		Version: u.GetVersion(), Nonce: u.GetNonce(), Code: federationpb.NackCode_NACK_CODE_INVALID, Reason: "endpoint demo/echo/10.0.0.1: bad",
	}}})
	ut.eventually(t, "the nack's reason", func(st Status) bool { return st.LastNackReason == "endpoint demo/echo/10.0.0.1: bad" })
	s.close()
	ut.eventually(t, "disconnected", func(st Status) bool { return !st.Connected })
}
