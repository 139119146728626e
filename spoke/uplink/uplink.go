package uplink

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/shard"
)

// Stream is the part of a Sync stream the protocol uses.
type Stream interface {
	Send(*federationpb.SpokeMessage) error
	Recv() (*federationpb.HubMessage, error)
}

// Dialer opens a new Sync stream; the stream ends when ctx ends.
type Dialer func(ctx context.Context) (Stream, error)

// Config configures the uplink.
type Config struct {
	ClusterID string
	Build     string
	// MaxMessageBytes bounds the messages this spoke sends, when the hub
	// announces no lower limit.
	MaxMessageBytes int
	// Backoff bounds the wait between reconnects (jittered, doubling).
	MinBackoff, MaxBackoff time.Duration
	// WelcomeTimeout bounds the wait for the hub's answer to Hello.
	WelcomeTimeout time.Duration
	// FullAcked, when set, is called on the uplink's goroutine after the
	// hub acknowledges a full state: the end of a burst of work.
	FullAcked func()
}

// WithDefaults fills in zero fields.
func (c Config) WithDefaults() Config {
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 4 << 20
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 250 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.WelcomeTimeout == 0 {
		c.WelcomeTimeout = 15 * time.Second
	}
	return c
}

// Status is what the uplink reports about its connection.
type Status struct {
	Connected      bool
	Resumed        bool
	Reconnects     int
	LastNackReason string
	BytesSent      int64
}

// Uplink streams a tracker's shard to the hub.
type Uplink struct {
	cfg  Config
	t    *shard.Tracker
	dial Dialer
	log  *slog.Logger

	mu     sync.Mutex
	status Status
}

// New returns an uplink sending t's updates over streams from dial.
func New(cfg Config, t *shard.Tracker, dial Dialer, log *slog.Logger) *Uplink {
	return &Uplink{cfg: cfg.WithDefaults(), t: t, dial: dial, log: log}
}

// Status returns a copy of the uplink's status.
func (u *Uplink) Status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.status
}

func (u *Uplink) setStatus(fn func(*Status)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fn(&u.status)
}

// Run keeps a stream to the hub until ctx ends; it returns nil then.
func (u *Uplink) Run(ctx context.Context) error {
	backoff := u.cfg.MinBackoff
	for {
		welcomed, err := u.session(ctx)
		u.setStatus(func(s *Status) { s.Connected = false })
		if ctx.Err() != nil {
			return nil
		}
		if welcomed {
			backoff = u.cfg.MinBackoff
		}
		// Full jitter keeps a fleet of spokes from reconnecting in lockstep
		// after a hub restart.
		wait := time.Duration(rand.Int64N(int64(backoff))) + u.cfg.MinBackoff/2
		u.log.Warn("hub stream ended; reconnecting", "err", err, "after", wait.Round(time.Millisecond))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		backoff = min(2*backoff, u.cfg.MaxBackoff)
		u.setStatus(func(s *Status) { s.Reconnects++ })
	}
}

// session runs one stream. welcomed reports whether the hub answered Hello.
func (u *Uplink) session(ctx context.Context) (welcomed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := u.dial(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	hello := u.t.Hello(u.cfg.ClusterID, u.cfg.Build)
	if err := stream.Send(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: hello}}); err != nil {
		return false, fmt.Errorf("send hello: %w", err)
	}

	msgs := make(chan *federationpb.HubMessage)
	recvErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	// The stream ends with ctx; wait for the receiver so that it never
	// outlives the session.
	defer wg.Wait()
	defer cancel()

	welcomeTimer := time.NewTimer(u.cfg.WelcomeTimeout)
	defer welcomeTimer.Stop()
	var welcome *federationpb.Welcome
	for welcome == nil {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case err := <-recvErr:
			return false, fmt.Errorf("waiting for welcome: %w", err)
		case <-welcomeTimer.C:
			return false, errors.New("the hub did not answer hello in time")
		case m := <-msgs:
			welcome = m.GetWelcome()
			if welcome == nil {
				return false, fmt.Errorf("the hub's first message is %T, not welcome", m.GetKind())
			}
		}
	}
	maxBytes := u.cfg.MaxMessageBytes
	if hubMax := int(welcome.GetLimits().GetMaxMessageBytes()); hubMax > 0 && hubMax < maxBytes {
		maxBytes = hubMax
	}
	u.t.Reconnected(welcome.GetResume(), welcome.GetVersion())
	u.setStatus(func(s *Status) { s.Connected, s.Resumed = true, welcome.GetResume() })
	u.log.Info("connected to hub", "hub", welcome.GetHubId(), "resume", welcome.GetResume(), "version", welcome.GetVersion())

	// After a Nack the next (full) update waits for a backoff and then for
	// a change, so that a shard the hub cannot take is not resent in a loop.
	var retryC <-chan time.Time
	waitChange := false
	nackBackoff := time.Second
	for {
		if retryC == nil && !waitChange {
			if err := u.sendNext(stream, maxBytes); err != nil {
				return true, err
			}
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case err := <-recvErr:
			return true, fmt.Errorf("receive: %w", err)
		case <-u.t.Changed():
			waitChange = false
		case <-retryC:
			retryC, waitChange = nil, !u.t.Pending()
		case m := <-msgs:
			switch {
			case m.GetAck() != nil:
				if u.t.Acked(m.GetAck().GetVersion()) && u.cfg.FullAcked != nil {
					u.cfg.FullAcked()
				}
				nackBackoff = time.Second
			case m.GetNack() != nil:
				n := m.GetNack()
				if !u.t.Nacked(n.GetVersion()) {
					continue
				}
				u.setStatus(func(s *Status) { s.LastNackReason = n.GetReason() })
				u.log.Error("the hub rejected an update; it keeps its last good shard",
					"version", n.GetVersion(), "code", n.GetCode(), "object", n.GetObject(), "field", n.GetField(), "reason", n.GetReason())
				if n.GetCode() != federationpb.NackCode_NACK_CODE_NO_BASE {
					retryC = time.After(nackBackoff)
					nackBackoff = min(2*nackBackoff, u.cfg.MaxBackoff)
				}
			}
		}
	}
}

// sendNext sends the tracker's next update, if any, in chunks.
func (u *Uplink) sendNext(stream Stream, maxBytes int) error {
	upd := u.t.Next(newNonce(), maxBytes)
	if upd == nil {
		return nil
	}
	sent := 0
	for i := range upd.Len() {
		m := &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: upd.Chunk(i)}}
		if err := stream.Send(m); err != nil {
			return fmt.Errorf("send version %d: %w", upd.Version(), err)
		}
		sent += proto.Size(m)
	}
	u.setStatus(func(s *Status) { s.BytesSent += int64(sent) })
	u.log.Debug("update sent", "version", upd.Version(), "full", upd.Full(), "chunks", upd.Len(), "bytes", sent)
	return nil
}

func newNonce() string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
