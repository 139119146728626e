package syncproto

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/recvloop"
)

// Shard is the spoke's shard as its sessions use it (spoke/shard.Tracker
// is one). One session uses it at a time.
type Shard interface {
	// Hello returns a new stream's Hello: the shard's session, and the
	// last versions acknowledged and sent in it.
	Hello(clusterID, build string) *federationpb.Hello
	// Reconnected takes the hub's Welcome: resumed at version, or not (the
	// next update is the full state).
	Reconnected(resume bool, version uint64)
	// Next returns the next update to send, in chunks that stay under
	// maxBytes, and marks it in flight. It returns nil when there is
	// nothing to send (yet).
	Next(nonce string, maxBytes int) Update
	// Acked records the hub's Ack of a version and reports whether it
	// acknowledged a full state.
	Acked(version uint64) (full bool)
	// Nacked records the hub's Nack of a version; false when the version
	// is not in flight.
	Nacked(version uint64) bool
	// Pending reports whether changes wait to be sent.
	Pending() bool
	// Changed has a value when there may be something new to send.
	Changed() <-chan struct{}
}

// Update is one version of the shard as chunks, each encoded when taken:
// chunk i can be taken once.
type Update interface {
	Version() uint64
	Full() bool
	Len() int
	Chunk(i int) *federationpb.ShardUpdate
}

// SpokeObserver learns what a spoke's sessions do, for status, logs and
// metrics. Its methods run on the session's goroutine and must not block.
type SpokeObserver interface {
	// Welcomed: the hub answered Hello.
	Welcomed(w *federationpb.Welcome)
	// Sent: every chunk of u left, bytes in all.
	Sent(u Update, bytes int)
	// Acked: the hub acknowledged version; full when it was a full state in
	// flight.
	Acked(version uint64, full bool)
	// Nacked: the hub rejected the update in flight.
	Nacked(n *federationpb.Nack)
}

// SpokeConfig configures a spoke's sessions. Every field but Members is
// required.
type SpokeConfig struct {
	ClusterID string
	Build     string
	// Clusterset is the clusterset the cluster is a member of (its About
	// API's clusterset.k8s.io; empty: none). The hub of another one
	// refuses the spoke, and the spoke leaves a hub that names another.
	Clusterset string
	// MaxMessageBytes bounds the messages sent, unless the hub announces a
	// lower limit.
	MaxMessageBytes int
	// WelcomeTimeout bounds the wait for the hub's answer to Hello.
	WelcomeTimeout time.Duration
	// AckTimeout bounds the time without progress on the update in flight:
	// sending a chunk, or, after the last, the hub's answer.
	AckTimeout time.Duration
	// NackBackoff is the first wait before the full state follows a Nack;
	// it doubles with each Nack up to MaxNackBackoff, and an Ack resets it.
	NackBackoff, MaxNackBackoff time.Duration
	Clock                       clock.WithDelayedExecution
	// Members, when set, is the membership shared with the spoke's other
	// sessions (to other hub replicas); by default the spoke keeps its own.
	Members *Members
	// Imports, when set, takes the imports the hub sends and reports what
	// the cluster holds of them.
	Imports ImportsLink
	// WritesImports: the spoke writes the imports into its cluster (its
	// reports of what the cluster holds count). Mesh: it serves its
	// cluster's mesh every federated service. RemoteViews: it serves its
	// istiod each other member as a remote cluster (Hello.remote_views).
	// Each needs Imports.
	WritesImports, Mesh, RemoteViews bool
}

// MaxMembers bounds the membership a spoke keeps and repeats in its
// Hello.
const MaxMembers = 1000

// Members is the clusterset's membership as the last hub told it. The
// sessions of a spoke with several hub replicas share one, so that each
// Hello names every member any replica knows, a replica that restarted
// included.
type Members struct {
	mu   sync.Mutex
	list []string
}

// Get returns the members.
func (m *Members) Get() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.list)
}

// Set replaces the members, keeping at most MaxMembers.
func (m *Members) Set(list []string) {
	if len(list) > MaxMembers {
		list = list[:MaxMembers]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.list = slices.Clone(list)
}

// Spoke runs a spoke's sessions, one at a time.
type Spoke struct {
	cfg     SpokeConfig
	shard   Shard
	obs     SpokeObserver
	members *Members
}

// Members returns the clusterset's members as the last hub told them.
func (s *Spoke) Members() []string { return s.members.Get() }

// NewSpoke returns a spoke sending shard's updates.
func NewSpoke(cfg SpokeConfig, shard Shard, obs SpokeObserver) *Spoke {
	m := cfg.Members
	if m == nil {
		m = &Members{}
	}
	return &Spoke{cfg: cfg, shard: shard, obs: obs, members: m}
}

// Session runs one stream from dial until it fails or ctx ends, and
// reports whether the hub welcomed it. Its receiver has returned when it
// returns.
func (s *Spoke) Session(ctx context.Context, dial Dialer) (welcomed bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t, err := dial(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	r := recvloop.Start(ctx, t.Recv)
	defer func() {
		cancel(nil)
		<-r.Done() // the stream ends with ctx, and Recv with it
	}()
	welcome, err := s.hello(ctx, cancel, t, r)
	if err != nil {
		return false, err
	}
	maxBytes := s.cfg.MaxMessageBytes
	if hubMax := int(welcome.GetLimits().GetMaxMessageBytes()); hubMax > 0 && hubMax < maxBytes {
		maxBytes = hubMax
	}
	s.shard.Reconnected(welcome.GetResume(), welcome.GetVersion())
	s.obs.Welcomed(welcome)
	ss := &spokeSession{Spoke: s, t: t, r: r, cancel: cancel, maxBytes: maxBytes, nackBackoff: s.cfg.NackBackoff}
	defer ss.stop()
	if s.cfg.Imports != nil {
		s.cfg.Imports.Start()
		defer s.cfg.Imports.Stop()
		ss.heldChanged = s.cfg.Imports.HeldChanged()
	}
	return true, ss.run(ctx)
}

// hello sends Hello and waits for the Welcome.
func (s *Spoke) hello(ctx context.Context, cancel context.CancelCauseFunc, t SpokeTransport, r *recvloop.Loop[*federationpb.HubMessage]) (*federationpb.Welcome, error) {
	timer := s.cfg.Clock.AfterFunc(s.cfg.WelcomeTimeout, func() { cancel(ErrWelcomeTimeout) })
	defer timer.Stop()
	hello := s.shard.Hello(s.cfg.ClusterID, s.cfg.Build)
	hello.ProtocolVersion = ProtocolVersion
	hello.Members = s.Members()
	hello.Imports = s.cfg.Imports != nil && s.cfg.WritesImports
	hello.Mesh = s.cfg.Imports != nil && (s.cfg.Mesh || s.cfg.RemoteViews)
	hello.RemoteViews = s.cfg.Imports != nil && s.cfg.RemoteViews
	hello.Clusterset = s.cfg.Clusterset
	if err := t.Send(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: hello}}); err != nil {
		return nil, cause(ctx, fmt.Errorf("send hello: %w", err))
	}
	select {
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-r.Done():
		return nil, cause(ctx, fmt.Errorf("waiting for welcome: %w", r.Err()))
	case m := <-r.Msgs():
		if w := m.GetWelcome(); w != nil {
			if cs := w.GetClusterset(); cs != "" && s.cfg.Clusterset != "" && cs != s.cfg.Clusterset {
				return nil, fmt.Errorf("%w: this cluster is a member of clusterset %q (ClusterProperty clusterset.k8s.io); hub %q (build %q) serves clusterset %q",
					ErrOtherClusterset, s.cfg.Clusterset, w.GetHubId(), w.GetBuild(), cs)
			}
			return w, nil
		}
		return nil, fmt.Errorf("%w: it is %T", ErrNoWelcome, m.GetKind())
	}
}

// spokeSession is the state of one welcomed stream.
type spokeSession struct {
	*Spoke
	t        SpokeTransport
	r        *recvloop.Loop[*federationpb.HubMessage]
	cancel   context.CancelCauseFunc
	maxBytes int

	inflight uint64      // the version awaiting an answer (0: none)
	ack      clock.Timer // ends the session when the update in flight stalls
	// After a Nack, the full state waits for a backoff (retryC) and then
	// for a change (waitChange), so that a shard the hub cannot take is
	// not resent in a loop.
	retry       clock.Timer
	retryC      <-chan time.Time
	waitChange  bool
	nackBackoff time.Duration

	imports     importsAssembler
	heldChanged <-chan struct{} // nil for a spoke that writes no imports
}

func (ss *spokeSession) run(ctx context.Context) error {
	for {
		if ss.inflight == 0 && ss.retryC == nil && !ss.waitChange {
			if err := ss.sendNext(); err != nil {
				return cause(ctx, err)
			}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ss.r.Done():
			return cause(ctx, fmt.Errorf("receive: %w", ss.r.Err()))
		case <-ss.shard.Changed():
			ss.waitChange = false
		case <-ss.retryC:
			ss.retryC, ss.waitChange = nil, !ss.shard.Pending()
		case <-ss.heldChanged:
			for _, h := range ss.cfg.Imports.NextHeld(ss.maxBytes) {
				if err := ss.t.Send(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Held{Held: h}}); err != nil {
					return cause(ctx, fmt.Errorf("send imports held: %w", err))
				}
			}
		case m := <-ss.r.Msgs():
			if err := ss.answer(m); err != nil {
				return err
			}
		}
	}
}

// sendNext sends the shard's next update, if any, chunk by chunk.
func (ss *spokeSession) sendNext() error {
	u := ss.shard.Next(newNonce(), ss.maxBytes)
	if u == nil {
		return nil
	}
	ss.inflight = u.Version()
	sent := 0
	for i := range u.Len() {
		ss.armAck()
		chunk := u.Chunk(i)
		chunk.SentTime = timestamppb.New(ss.cfg.Clock.Now())
		m := &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: chunk}}
		if err := ss.t.Send(m); err != nil {
			return fmt.Errorf("send version %d: %w", u.Version(), err)
		}
		sent += proto.Size(m)
	}
	ss.armAck()
	ss.obs.Sent(u, sent)
	return nil
}

// armAck starts the update's deadline anew: it has made progress.
func (ss *spokeSession) armAck() {
	if ss.ack == nil {
		ss.ack = ss.cfg.Clock.AfterFunc(ss.cfg.AckTimeout, func() { ss.cancel(ErrAckTimeout) })
		return
	}
	ss.ack.Reset(ss.cfg.AckTimeout)
}

// answer takes one message of the hub's. An error ends the session.
func (ss *spokeSession) answer(m *federationpb.HubMessage) error {
	switch {
	case m.GetAck() != nil:
		v := m.GetAck().GetVersion()
		ss.answered(v)
		ss.obs.Acked(v, ss.shard.Acked(v))
		ss.nackBackoff = ss.cfg.NackBackoff
	case m.GetNack() != nil:
		n := m.GetNack()
		if !ss.shard.Nacked(n.GetVersion()) {
			return nil // not the version in flight: an answer already had
		}
		ss.answered(n.GetVersion())
		ss.obs.Nacked(n)
		if n.GetCode() != federationpb.NackCode_NACK_CODE_NO_BASE {
			ss.retryAfter(ss.nackBackoff)
			ss.nackBackoff = min(2*ss.nackBackoff, ss.cfg.MaxNackBackoff)
		}
	case m.GetMembers() != nil:
		ss.members.Set(m.GetMembers().GetClusters())
	case m.GetImports() != nil && ss.cfg.Imports != nil:
		set, err := ss.imports.add(m.GetImports())
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadImports, err)
		}
		if set != nil {
			ss.cfg.Imports.Received(set)
		}
	}
	// Other kinds (a second Welcome, kinds of newer hubs) are ignored.
	return nil
}

func (ss *spokeSession) answered(version uint64) {
	if ss.inflight != 0 && version == ss.inflight {
		ss.inflight = 0
		ss.ack.Stop()
	}
}

func (ss *spokeSession) retryAfter(d time.Duration) {
	if ss.retry == nil {
		ss.retry = ss.cfg.Clock.NewTimer(d)
	} else {
		ss.retry.Reset(d)
	}
	ss.retryC = ss.retry.C()
}

func (ss *spokeSession) stop() {
	if ss.ack != nil {
		ss.ack.Stop()
	}
	if ss.retry != nil {
		ss.retry.Stop()
	}
}

// cause returns why ctx ended, once it has (a stream fails when its
// context ends, and a deadline's cause says more than the failure), or
// else err.
func cause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func newNonce() string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
