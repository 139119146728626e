package uplink

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
)

// Stream is the part of a Sync stream the uplink uses.
type Stream interface {
	Send(*federationpb.SpokeMessage) error
	Recv() (*federationpb.HubMessage, error)
}

var _ syncproto.SpokeTransport = Stream(nil)

// Dialer opens a new Sync stream; the stream ends when ctx ends.
type Dialer func(ctx context.Context) (Stream, error)

// DefaultAckTimeout is long enough for a hub busy with a fleet's initial
// syncs to answer a large update, and short enough that a spoke leaves a
// wedged hub stream within minutes.
const DefaultAckTimeout = time.Minute

// Config configures the uplink.
type Config struct {
	ClusterID string
	Build     string
	// Clusterset is the clusterset the cluster is a member of, from its
	// About API ("": it names none).
	Clusterset string
	// Hub names the hub replica in logs and metrics (its address).
	Hub string
	// Metrics, when set, exports the uplink's status (see [Metrics]).
	Metrics *Metrics
	// Members, when set, is the clusterset's membership shared with the
	// spoke's uplinks to other hub replicas.
	Members *syncproto.Members
	// Imports, when set, takes the imports this hub replica sends and
	// reports to it what the cluster holds. WritesImports: the spoke
	// writes them into its cluster; Mesh: it serves them to its cluster's
	// mesh (every federated service, not only the MCS imports);
	// RemoteViews: it serves its istiod each other member as a remote
	// cluster.
	Imports                          syncproto.ImportsLink
	WritesImports, Mesh, RemoteViews bool
	// MaxMessageBytes bounds the messages this spoke sends, when the hub
	// announces no lower limit.
	MaxMessageBytes int
	// Backoff bounds the wait between reconnects after failures (dials
	// that fail, streams the hub never welcomed or dropped soon after its
	// Welcome): jittered, doubling from MinBackoff up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// ReconnectJitter bounds the wait before the first reconnect after a
	// healthy stream ended (the hub restarted or dropped it): uniform in
	// [0, ReconnectJitter), so that a fleet of spokes comes back at once
	// but not in the same millisecond. Zero: min(MinBackoff, 1s), so that
	// the reconnect never waits longer than a failure's first backoff;
	// negative: no wait.
	ReconnectJitter time.Duration
	// WelcomeTimeout bounds the wait for the hub's answer to Hello.
	WelcomeTimeout time.Duration
	// AckTimeout bounds how long the update in flight may make no
	// progress (a chunk sent, or after the last the hub's answer): the
	// stream is then reopened, and the spoke resumes from what the hub has.
	AckTimeout time.Duration
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
	if c.ReconnectJitter == 0 {
		c.ReconnectJitter = min(c.MinBackoff, time.Second)
	}
	if c.WelcomeTimeout == 0 {
		c.WelcomeTimeout = 15 * time.Second
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	return c
}

// nackBackoff is the first wait before the full state follows a Nack.
const nackBackoff = time.Second

// healthySession is how long a welcomed stream must have lasted for its
// end to be followed by an immediate reconnect. A hub that welcomes and
// then drops streams (two spokes of one cluster superseding each other,
// a hub failing on the spoke's full state) would otherwise be reconnected
// to in a loop; such streams back off like failed dials.
const healthySession = 10 * time.Second

// Status is what the uplink reports about its connection.
type Status struct {
	// Connected: the hub welcomed the current stream.
	Connected bool
	// Resumed: the hub resumed the session of the last stream it
	// welcomed, rather than asking for the full state.
	Resumed bool
	// Sessions counts the streams the hub welcomed, Resumes those of them
	// it resumed.
	Sessions, Resumes int
	// Reconnects counts the waits before a new stream.
	Reconnects int
	// Acks and Nacks count the hub's answers to updates in flight.
	Acks, Nacks int
	// LastAck is when the hub last acknowledged an update, by the
	// uplink's clock; AckedVersion is the version it acknowledged.
	LastAck      time.Time
	AckedVersion uint64
	// LastNackReason is the reason of the hub's last Nack.
	LastNackReason string
	// BytesSent counts the encoded bytes of every update sent.
	BytesSent int64
	// LastFullBytes and LastFullChunks are the size of the last full
	// state sent: the spoke's largest message burst.
	LastFullBytes  int64
	LastFullChunks int
}

// Uplink streams a shard to the hub.
type Uplink struct {
	cfg    Config
	dial   Dialer
	log    *slog.Logger
	clock  clock.WithDelayedExecution
	jitter func(n int64) int64 // in [0, n)
	spoke  *syncproto.Spoke
	// updateBytes is the histogram of the updates' sizes, by kind (its
	// observations are not in the Status).
	updateBytes prometheus.ObserverVec

	mu     sync.Mutex
	status Status
}

// New returns an uplink sending the updates of shard (a shard.Tracker)
// over streams from dial.
func New(cfg Config, shard syncproto.Shard, dial Dialer, log *slog.Logger) *Uplink {
	return newUplink(cfg, shard, dial, log, clock.RealClock{}, rand.Int64N)
}

func newUplink(cfg Config, shard syncproto.Shard, dial Dialer, log *slog.Logger, clk clock.WithDelayedExecution, jitter func(int64) int64) *Uplink {
	u := &Uplink{cfg: cfg.WithDefaults(), dial: dial, log: log, clock: clk, jitter: jitter}
	vec := newUpdateBytes()
	if cfg.Metrics != nil {
		vec = cfg.Metrics.updateBytes
		cfg.Metrics.add(u)
	}
	u.updateBytes = vec.MustCurryWith(prometheus.Labels{"hub": cfg.Hub})
	u.spoke = syncproto.NewSpoke(syncproto.SpokeConfig{
		ClusterID:       u.cfg.ClusterID,
		Build:           u.cfg.Build,
		Clusterset:      u.cfg.Clusterset,
		MaxMessageBytes: u.cfg.MaxMessageBytes,
		WelcomeTimeout:  u.cfg.WelcomeTimeout,
		AckTimeout:      u.cfg.AckTimeout,
		NackBackoff:     nackBackoff,
		MaxNackBackoff:  u.cfg.MaxBackoff,
		Clock:           clk,
		Members:         cfg.Members,
		Imports:         cfg.Imports,
		WritesImports:   cfg.WritesImports,
		Mesh:            cfg.Mesh,
		RemoteViews:     cfg.RemoteViews,
	}, shard, observer{u})
	return u
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
//
// It keeps two backoffs. One is for failing to get a stream welcomed
// (dials, no Welcome), and the hub's Welcome resets it: a spoke that
// waited out a long outage does not keep that outage's backoff when the
// hub goes away again. The other is for streams the hub drops soon after
// welcoming them, and only a healthy stream resets it, so that a hub that
// welcomes and drops in a loop is not reconnected to in a loop.
func (u *Uplink) Run(ctx context.Context) error {
	dial := func(ctx context.Context) (syncproto.SpokeTransport, error) { return u.dial(ctx) }
	failures, drops := u.cfg.MinBackoff, u.cfg.MinBackoff
	for {
		start := u.clock.Now()
		welcomed, err := u.spoke.Session(ctx, dial)
		u.setStatus(func(s *Status) { s.Connected = false })
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		switch {
		case !welcomed:
			wait = u.backoff(&failures)
		case u.clock.Since(start) < healthySession:
			failures = u.cfg.MinBackoff
			wait = u.backoff(&drops)
		default:
			// The hub restarted or dropped a stream that worked: every
			// spoke of the fleet wants back at once, and the jitter keeps
			// them from arriving in the same millisecond.
			failures, drops = u.cfg.MinBackoff, u.cfg.MinBackoff
			if u.cfg.ReconnectJitter > 0 {
				wait = time.Duration(u.jitter(int64(u.cfg.ReconnectJitter)))
			}
		}
		u.log.Warn("hub stream ended; reconnecting", "err", err, "retry_in", wait.Round(time.Millisecond))
		timer := u.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
		u.setStatus(func(s *Status) { s.Reconnects++ })
	}
}

// backoff returns the wait after a failure with backoff b and doubles b.
// Full jitter keeps a fleet of spokes from retrying in lockstep while the
// hub is away.
func (u *Uplink) backoff(b *time.Duration) time.Duration {
	wait := time.Duration(u.jitter(int64(*b))) + u.cfg.MinBackoff/2
	*b = min(2**b, u.cfg.MaxBackoff)
	return wait
}

// observer keeps the uplink's status and logs from what its sessions do.
type observer struct{ u *Uplink }

var _ syncproto.SpokeObserver = observer{}

// Welcomed implements syncproto.SpokeObserver.
func (o observer) Welcomed(w *federationpb.Welcome) {
	o.u.setStatus(func(s *Status) {
		s.Connected, s.Resumed = true, w.GetResume()
		s.Sessions++
		if w.GetResume() {
			s.Resumes++
		}
	})
	o.u.log.Info("connected to hub", "hub", w.GetHubId(), "hub_build", w.GetBuild(), "protocol", w.GetProtocolVersion(),
		"resume", w.GetResume(), "version", w.GetVersion())
}

// Sent implements syncproto.SpokeObserver.
func (o observer) Sent(upd syncproto.Update, bytes int) {
	o.u.setStatus(func(s *Status) {
		s.BytesSent += int64(bytes)
		if upd.Full() {
			s.LastFullBytes, s.LastFullChunks = int64(bytes), upd.Len()
		}
	})
	o.u.updateBytes.WithLabelValues(updateKind(upd.Full())).Observe(float64(bytes))
	o.u.log.Debug("update sent", "version", upd.Version(), "full", upd.Full(), "chunks", upd.Len(), "bytes", bytes)
}

// Acked implements syncproto.SpokeObserver.
func (o observer) Acked(version uint64, full bool) {
	now := o.u.clock.Now()
	o.u.setStatus(func(s *Status) { s.Acks, s.LastAck, s.AckedVersion = s.Acks+1, now, version })
	if full && o.u.cfg.FullAcked != nil {
		o.u.cfg.FullAcked()
	}
}

// Nacked implements syncproto.SpokeObserver.
func (o observer) Nacked(n *federationpb.Nack) {
	o.u.setStatus(func(s *Status) { s.Nacks, s.LastNackReason = s.Nacks+1, n.GetReason() })
	o.u.log.Error("the hub rejected an update; it keeps its last good shard",
		"version", n.GetVersion(), "code", n.GetCode(), "object", n.GetObject(), "field", n.GetField(), "reason", n.GetReason())
}
