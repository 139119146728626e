package syncproto

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// pipe is an in-memory stream: each end receives what the other sent, in
// order, until either closes it.
type pipe struct {
	toHub   chan *federationpb.SpokeMessage
	toSpoke chan *federationpb.HubMessage
	done    chan struct{}
	once    sync.Once
}

// newPipe returns a pipe that holds up to buffer messages each way before
// Send blocks.
func newPipe(buffer int) *pipe {
	return &pipe{
		toHub:   make(chan *federationpb.SpokeMessage, buffer),
		toSpoke: make(chan *federationpb.HubMessage, buffer),
		done:    make(chan struct{}),
	}
}

func (p *pipe) close() { p.once.Do(func() { close(p.done) }) }

func send[M any](p *pipe, ch chan M, m M) error {
	select {
	case <-p.done:
		return io.EOF
	default:
	}
	select {
	case ch <- m:
		return nil
	case <-p.done:
		return io.EOF
	}
}

func recv[M any](p *pipe, ch chan M) (M, error) {
	select {
	case m := <-ch:
		return m, nil
	case <-p.done:
		var zero M
		return zero, io.EOF
	}
}

// spokeEnd and hubEnd are the pipe's two ends.
type (
	spokeEnd struct{ *pipe }
	hubEnd   struct{ *pipe }
)

func (e spokeEnd) Send(m *federationpb.SpokeMessage) error { return send(e.pipe, e.toHub, m) }
func (e spokeEnd) Recv() (*federationpb.HubMessage, error) { return recv(e.pipe, e.toSpoke) }
func (e hubEnd) Send(m *federationpb.HubMessage) error     { return send(e.pipe, e.toSpoke, m) }
func (e hubEnd) Recv() (*federationpb.SpokeMessage, error) { return recv(e.pipe, e.toHub) }
func (e hubEnd) expect(t *testing.T) *federationpb.SpokeMessage {
	t.Helper()
	return expect(t, e.pipe, e.toHub)
}

func (e spokeEnd) expect(t *testing.T) *federationpb.HubMessage {
	t.Helper()
	return expect(t, e.pipe, e.toSpoke)
}

// expect returns the next message on ch, failing the test when the stream
// ends or nothing comes.
func expect[M any](t *testing.T, p *pipe, ch chan M) M {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var zero M
	select {
	case m := <-ch:
		return m
	case <-p.done:
		t.Fatal("the stream ended")
	case <-ctx.Done():
		t.Fatal("nothing was received")
	}
	return zero
}

// dialer hands out pipes bound to the dialing context, as gRPC streams
// are, and gives the test their hub ends.
type dialer struct {
	buffer int
	hubs   chan hubEnd
}

func newDialer(buffer int) *dialer { return &dialer{buffer: buffer, hubs: make(chan hubEnd, 8)} }

func (d *dialer) dial(ctx context.Context) (SpokeTransport, error) {
	p := newPipe(d.buffer)
	context.AfterFunc(ctx, p.close)
	d.hubs <- hubEnd{p}
	return spokeEnd{p}, nil
}

func (d *dialer) next(t *testing.T) hubEnd {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	select {
	case h := <-d.hubs:
		return h
	case <-ctx.Done():
		t.Fatal("no stream dialed")
		return hubEnd{}
	}
}

// fakeShard hands out the updates a test queues, one in flight at a time,
// and records the calls a session makes.
type fakeShard struct {
	clock   *testingclock.FakeClock
	changed chan struct{}

	mu          sync.Mutex
	queue       []*fakeUpdate
	inflight    *fakeUpdate
	reconnected []bool
	acked       []uint64
	nexts       []time.Time // when the session asked for an update, by the clock
	maxBytes    int         // the last limit it asked with
}

func newFakeShard(clock *testingclock.FakeClock) *fakeShard {
	return &fakeShard{clock: clock, changed: make(chan struct{}, 1)}
}

// push queues an update of version with one chunk per list of endpoints.
func (s *fakeShard) push(version uint64, full bool, chunks ...[]string) {
	u := &fakeUpdate{version: version, full: full}
	for i, addrs := range chunks {
		c := &federationpb.ShardUpdate{Version: version, Full: full, More: i < len(chunks)-1}
		for _, a := range addrs {
			c.Endpoints = append(c.Endpoints, &federationpb.Endpoint{Namespace: "demo", Service: "echo", Address: a})
		}
		u.chunks = append(u.chunks, c)
	}
	s.mu.Lock()
	s.queue = append(s.queue, u)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *fakeShard) Hello(clusterID, build string) *federationpb.Hello {
	return &federationpb.Hello{ClusterId: clusterID, Build: build, Session: "s1"}
}

func (s *fakeShard) Reconnected(resume bool, _ uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconnected = append(s.reconnected, resume)
	if s.inflight != nil {
		s.queue = append([]*fakeUpdate{s.inflight}, s.queue...)
		s.inflight = nil
	}
}

func (s *fakeShard) Next(nonce string, maxBytes int) Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nexts = append(s.nexts, s.clock.Now())
	s.maxBytes = maxBytes
	if s.inflight != nil || len(s.queue) == 0 {
		return nil
	}
	u := s.queue[0]
	s.queue, s.inflight = s.queue[1:], u
	for _, c := range u.chunks {
		c.Nonce = nonce
	}
	return u
}

func (s *fakeShard) Acked(version uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight == nil || s.inflight.version != version {
		return false
	}
	s.acked = append(s.acked, version)
	full := s.inflight.full
	s.inflight = nil
	return full
}

func (s *fakeShard) Nacked(version uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight == nil || s.inflight.version != version {
		return false
	}
	s.inflight = nil
	return true
}

func (s *fakeShard) Pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0
}

func (s *fakeShard) Changed() <-chan struct{} { return s.changed }

type fakeUpdate struct {
	version uint64
	full    bool
	chunks  []*federationpb.ShardUpdate
}

func (u *fakeUpdate) Version() uint64                       { return u.version }
func (u *fakeUpdate) Full() bool                            { return u.full }
func (u *fakeUpdate) Len() int                              { return len(u.chunks) }
func (u *fakeUpdate) Chunk(i int) *federationpb.ShardUpdate { return u.chunks[i] }

// spokeEvents records what a spoke session reports.
type spokeEvents struct {
	welcomed chan *federationpb.Welcome
	nacked   chan *federationpb.Nack
	mu       sync.Mutex
	fulls    int
}

func newSpokeEvents() *spokeEvents {
	return &spokeEvents{welcomed: make(chan *federationpb.Welcome, 8), nacked: make(chan *federationpb.Nack, 8)}
}

func (e *spokeEvents) Welcomed(w *federationpb.Welcome) { e.welcomed <- w }
func (e *spokeEvents) Sent(Update, int)                 {}
func (e *spokeEvents) Nacked(n *federationpb.Nack)      { e.nacked <- n }
func (e *spokeEvents) Acked(_ uint64, full bool) {
	if full {
		e.mu.Lock()
		e.fulls++
		e.mu.Unlock()
	}
}

// fakeConn is a registry that applies every update whose version is above
// its last, or returns the error a test sets.
type fakeConn struct {
	superseded chan struct{}

	mu       sync.Mutex
	session  string
	version  uint64
	applyErr error
	applied  []*federationpb.ShardUpdate
	nacks    []string
	closed   bool
	importer bool
	held     []*federationpb.ImportsHeld
}

func newFakeConn() *fakeConn { return &fakeConn{superseded: make(chan struct{})} }

func (c *fakeConn) Resume(session string, acked, sent uint64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if session != c.session || c.version == 0 || c.version < acked || c.version > sent {
		return 0, false
	}
	return c.version, true
}

func (c *fakeConn) Apply(session string, u *federationpb.ShardUpdate) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applyErr != nil {
		return c.applyErr
	}
	c.session, c.version = session, u.GetVersion()
	c.applied = append(c.applied, u)
	return nil
}

func (c *fakeConn) RecordNack(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nacks = append(c.nacks, reason)
}

func (c *fakeConn) Superseded() <-chan struct{} { return c.superseded }

func (c *fakeConn) SetImporter() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.importer = true
}

func (c *fakeConn) ApplyHeld(h *federationpb.ImportsHeld) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.applyErr != nil {
		return c.applyErr
	}
	c.held = append(c.held, h)
	return nil
}

func (c *fakeConn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
}

func (c *fakeConn) connector() Connector {
	return func(context.Context, federation.ClusterID, *federationpb.Hello) (Conn, error) { return c, nil }
}

// hubEvents records what a hub session reports.
type hubEvents struct {
	mu       sync.Mutex
	welcome  *federationpb.Welcome
	received int
	applied  []uint64
	rejected []*federationpb.Nack
}

func (e *hubEvents) Connected(_ *federationpb.Hello, w *federationpb.Welcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.welcome = w
}

func (e *hubEvents) Received(*federationpb.SpokeMessage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.received++
}

func (e *hubEvents) Applied(u *federationpb.ShardUpdate) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.applied = append(e.applied, u.GetVersion())
}

func (e *hubEvents) Rejected(n *federationpb.Nack) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rejected = append(e.rejected, n)
}
