//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/ingest"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/spoke/uplink"
)

// memNet connects uplinks to an ingest server over in-memory streams, no
// gRPC and no sockets. Every message is encoded and decoded, as on the
// wire, and the network plays the faults a test gives it, each once.
type memNet struct {
	srv *ingest.Server
	reg *registry.Registry

	mu      sync.Mutex
	faults  []*fault
	streams []*memStream
	results []error // of the hub's sessions, as they end
	wg      sync.WaitGroup
}

// faultAction is what a fault does to the message it matches.
type faultAction int

const (
	drop      faultAction = iota
	duplicate             // deliver it twice
	delay                 // deliver it after the next message the same way
	stall                 // deliver nothing more the same way: the receiver stops reading
	rewrite               // deliver it changed by edit
	// cut breaks the stream without the hub noticing: nothing more arrives
	// either way, and the hub does not see the spoke leave.
	cut
)

type fault struct {
	toHub  bool
	match  func(proto.Message) bool
	action faultAction
	edit   func(proto.Message)      // for rewrite
	until  func(proto.Message) bool // for delay: deliver after the next message it matches (nil: any)
	fired  atomic.Bool
}

func newMemNet(t *testing.T, limits registry.Limits, maxMessageBytes int, faults ...*fault) *memNet {
	t.Helper()
	n := &memNet{reg: registry.New(registry.Config{Limits: limits}), faults: faults}
	n.srv = ingest.NewServer(ingest.Config{MaxMessageBytes: maxMessageBytes, HubID: "mem"}, n.reg, ingest.Insecure, nil, testLogger(t))
	// After the uplinks' cleanups; a cut stream's session ends only here.
	t.Cleanup(func() {
		n.mu.Lock()
		for _, s := range n.streams {
			s.endHub()
		}
		n.mu.Unlock()
		n.wg.Wait()
	})
	return n
}

// take returns the first fault not yet fired that matches m.
func (n *memNet) take(toHub bool, m proto.Message) *fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range n.faults {
		if f.toHub == toHub && !f.fired.Load() && f.match(m) {
			f.fired.Store(true)
			return f
		}
	}
	return nil
}

// fired reports whether every fault has fired.
func (n *memNet) fired() bool {
	for _, f := range n.faults {
		if !f.fired.Load() {
			return false
		}
	}
	return true
}

func (n *memNet) sessionResults() []error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]error(nil), n.results...)
}

// dial opens a stream and serves its hub side, as a gRPC server would.
func (n *memNet) dial(ctx context.Context) (uplink.Stream, error) {
	// The hub's end outlives the spoke's when the stream is cut.
	hubCtx, endHub := context.WithCancel(context.WithoutCancel(ctx))
	spokeCtx, endSpoke := context.WithCancel(ctx)
	s := &memStream{n: n, up: newLane(), down: newLane(), hub: hubCtx, spoke: spokeCtx, endHub: endHub, endSpoke: endSpoke}
	context.AfterFunc(spokeCtx, func() {
		if !s.cut.Load() {
			endHub()
		}
	})
	n.mu.Lock()
	n.streams = append(n.streams, s)
	n.mu.Unlock()
	n.wg.Add(1)
	go func() { //nolint:contextcheck // the stream carries the hub's context, as a gRPC server stream does
		defer n.wg.Done()
		err := n.srv.Serve(hubSide{s})
		n.mu.Lock()
		n.results = append(n.results, err)
		n.mu.Unlock()
		s.endHub() // a stream ends when its handler returns
		if !s.cut.Load() {
			s.endSpoke()
		}
	}()
	return spokeSide{s}, nil
}

// lane is one direction of a stream: encoded messages, in order.
type lane struct {
	ch chan []byte
	// A delayed message and what it waits for; only the sender touches them.
	held    []byte
	until   func(proto.Message) bool
	stalled atomic.Bool
}

func newLane() *lane { return &lane{ch: make(chan []byte, 16)} }

type memStream struct {
	n                *memNet
	up, down         *lane
	hub, spoke       context.Context // each end's view of the stream
	endHub, endSpoke context.CancelFunc
	cut              atomic.Bool
}

func (s *memStream) send(ctx context.Context, l *lane, toHub bool, m proto.Message) error {
	if ctx.Err() != nil {
		return io.EOF
	}
	if s.cut.Load() {
		return nil
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	// Faults see the message as its receiver will: the spoke's chunks
	// carry their objects pre-encoded.
	m = m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b, m); err != nil {
		return err
	}
	f := s.n.take(toHub, m)
	if f == nil {
		if err := push(ctx, l, b); err != nil {
			return err
		}
		if l.held != nil && (l.until == nil || l.until(m)) {
			held := l.held
			l.held, l.until = nil, nil
			return push(ctx, l, held)
		}
		return nil
	}
	switch f.action {
	case drop:
		return nil
	case duplicate:
		if err := push(ctx, l, b); err != nil {
			return err
		}
		return push(ctx, l, b)
	case delay:
		l.held, l.until = b, f.until
		return nil
	case stall:
		l.stalled.Store(true)
		return push(ctx, l, b)
	case rewrite:
		f.edit(m)
		if b, err = proto.Marshal(m); err != nil {
			return err
		}
		return push(ctx, l, b)
	case cut:
		s.cut.Store(true)
		return nil
	}
	return nil
}

func push(ctx context.Context, l *lane, b []byte) error {
	select {
	case l.ch <- b:
		return nil
	case <-ctx.Done():
		return io.EOF
	}
}

func (s *memStream) recv(ctx context.Context, l *lane, into proto.Message) error {
	select {
	case b := <-l.ch:
		if l.stalled.Load() || s.cut.Load() {
			<-ctx.Done()
			return io.EOF
		}
		return proto.Unmarshal(b, into)
	case <-ctx.Done():
		return io.EOF
	}
}

type (
	spokeSide struct{ *memStream }
	hubSide   struct{ *memStream }
)

func (s spokeSide) Send(m *federationpb.SpokeMessage) error { return s.send(s.spoke, s.up, true, m) }

func (s spokeSide) Recv() (*federationpb.HubMessage, error) {
	m := &federationpb.HubMessage{}
	if err := s.recv(s.spoke, s.down, m); err != nil {
		return nil, err
	}
	return m, nil
}

func (s hubSide) Context() context.Context              { return s.hub }
func (s hubSide) Send(m *federationpb.HubMessage) error { return s.send(s.hub, s.down, false, m) }

func (s hubSide) Recv() (*federationpb.SpokeMessage, error) {
	m := &federationpb.SpokeMessage{}
	if err := s.recv(s.hub, s.up, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Matchers of the messages faults apply to.

func spokeMsg(pred func(*federationpb.SpokeMessage) bool) func(proto.Message) bool {
	return func(m proto.Message) bool { return pred(m.(*federationpb.SpokeMessage)) }
}

func hubMsg(pred func(*federationpb.HubMessage) bool) func(proto.Message) bool {
	return func(m proto.Message) bool { return pred(m.(*federationpb.HubMessage)) }
}

var (
	isHello   = spokeMsg(func(m *federationpb.SpokeMessage) bool { return m.GetHello() != nil })
	isWelcome = hubMsg(func(m *federationpb.HubMessage) bool { return m.GetWelcome() != nil })
	isAck     = hubMsg(func(m *federationpb.HubMessage) bool { return m.GetAck() != nil })
	isNack    = hubMsg(func(m *federationpb.HubMessage) bool { return m.GetNack() != nil })
)

// isChunk matches chunks of full updates (full) or deltas, with more set
// or not.
func isChunk(full, more bool) func(proto.Message) bool {
	return spokeMsg(func(m *federationpb.SpokeMessage) bool {
		u := m.GetUpdate()
		return u != nil && u.GetFull() == full && u.GetMore() == more
	})
}

// nth matches the n-th message (from 1) that match matches.
func nth(n int, match func(proto.Message) bool) func(proto.Message) bool {
	var seen atomic.Int32
	return func(m proto.Message) bool { return match(m) && int(seen.Add(1)) == n }
}
