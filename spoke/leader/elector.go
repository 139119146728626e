package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	randv2 "math/rand/v2"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Elector campaigns for a Lease and runs the leader's work while it holds
// it. Create it with [NewElector]; [Elector.Run] campaigns.
type Elector struct {
	cfg    Config
	client LeaseClient
	log    *slog.Logger
	clock  clock.Clock
	// jitter returns how long a standby waits between tries.
	jitter func(time.Duration) time.Duration

	// Run's goroutine alone reads and writes these.
	lease *coordinationv1.Lease // as last read or written
	// observedVersion and observedAt: the Lease's resourceVersion, and
	// when this elector first saw it (its own clock: the holder's expiry
	// is timed from here, never from the holder's clock).
	observedVersion string
	observedAt      time.Time
	// renewedAt: when the last successful acquisition or renewal began.
	renewedAt time.Time
	// holder: the holder last logged while standing by.
	holder string

	mu      sync.Mutex
	leading bool
	changed chan struct{} // closed when leading changes
}

// NewElector returns an elector for the Lease cfg names; cfg.Namespace
// must be set (see [PodNamespace]). A nil log discards.
func NewElector(cfg Config, client LeaseClient, log *slog.Logger) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Namespace == "" {
		return nil, errors.New("leader election: the Lease's namespace is required")
	}
	if cfg.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("leader election identity: %w", err)
		}
		var suffix [4]byte
		_, _ = rand.Read(suffix[:]) // never fails
		cfg.Identity = host + "_" + hex.EncodeToString(suffix[:])
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Elector{
		cfg: cfg, client: client, clock: clock.RealClock{},
		log: log.With("lease", cfg.Namespace+"/"+cfg.LeaseName, "identity", cfg.Identity),
		jitter: func(d time.Duration) time.Duration {
			return d + randv2.N(time.Duration(jitterFactor*float64(d)))
		},
		changed: make(chan struct{}),
	}, nil
}

// Identity is this elector's name in the Lease.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Lease names the Lease: namespace/name.
func (e *Elector) Lease() string { return e.cfg.Namespace + "/" + e.cfg.LeaseName }

// Leading reports whether the elector holds the Lease and runs the
// leader's work.
func (e *Elector) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// Wait returns nil once the elector leads, or ctx's error when it ends
// first.
func (e *Elector) Wait(ctx context.Context) error {
	for {
		e.mu.Lock()
		leading, changed := e.leading, e.changed
		e.mu.Unlock()
		if leading {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (e *Elector) setLeading(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading != v {
		e.leading = v
		close(e.changed)
		e.changed = make(chan struct{})
	}
}

// errWorkEnded: the leader's work returned while it still led.
var errWorkEnded = errors.New("the leader's work ended while it led")

// Run campaigns until ctx ends. Each time the elector takes the Lease, it
// runs lead with a context that ends when it stops leading, and waits for
// lead to return before it campaigns again. When ctx ends it releases the
// Lease it holds, once lead has returned, so that a standby takes over
// within a RetryPeriod. It returns nil then, and lead's error (or an error
// saying lead returned) when lead returns while the elector leads.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	e.log.Info("campaigning for leadership", "lease_duration", e.cfg.LeaseDuration, "renew_deadline", e.cfg.RenewDeadline, "retry_period", e.cfg.RetryPeriod)
	for {
		if !e.acquire(ctx) {
			return nil
		}
		if err := e.lead(ctx, lead); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// acquire tries to take the Lease every RetryPeriod (jittered) until it
// does, or ctx ends (false).
func (e *Elector) acquire(ctx context.Context) bool {
	for {
		now := e.clock.Now()
		actx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
		held, err := e.tryAcquireOrRenew(actx, now)
		cancel()
		if held {
			e.renewedAt = now
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		wait := e.jitter(e.cfg.RetryPeriod)
		switch holder := e.holderOf(e.lease); {
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			// Another standby took it first; the next read says who.
			e.log.Debug("lost a race for the lease", "err", err)
		case err != nil:
			e.log.Warn("cannot read or take the lease; retrying", "err", err, "retry_in", wait)
		case holder != e.holder:
			e.holder = holder
			e.log.Info("standing by: another spoke leads", "holder", holder)
		}
		if !e.sleep(ctx, wait) {
			return false
		}
	}
}

// lead runs work while the elector holds the Lease, renewing it. It
// returns nil when the Lease is lost (work has returned then) or ctx ends
// (the Lease released), and work's error when work ends first.
func (e *Elector) lead(ctx context.Context, work func(ctx context.Context) error) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	e.setLeading(true)
	e.holder = e.cfg.Identity
	e.log.Info("leading: this spoke streams to the hub and writes into the cluster")
	go func() { done <- work(wctx) }()

	ended, err := e.renew(ctx, done)
	// Writes wait from here on, and only then is the work told to stop.
	e.setLeading(false)
	stop()
	switch {
	case !ended:
		err = <-done
	case err == nil && ctx.Err() == nil:
		err = errWorkEnded
	}
	if ctx.Err() != nil || ended {
		e.release(ctx)
		return err
	}
	e.log.Warn("no longer leading: standing by")
	return nil
}

// renew renews the Lease every RetryPeriod until ctx ends, work ends (true
// and its error), or the Lease is lost: another holder took it, or no
// renewal succeeded for RenewDeadline.
func (e *Elector) renew(ctx context.Context, done <-chan error) (bool, error) {
	t := e.clock.NewTimer(e.cfg.RetryPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case err := <-done:
			return true, err
		case <-t.C():
		}
		now := e.clock.Now()
		left := e.renewedAt.Add(e.cfg.RenewDeadline).Sub(now)
		if left <= 0 {
			e.log.Warn("could not renew the lease within the renew deadline")
			return false, nil
		}
		rctx, cancel := context.WithTimeout(ctx, left)
		held, err := e.tryAcquireOrRenew(rctx, now)
		cancel()
		switch {
		case held:
			e.renewedAt = now
			t.Reset(e.cfg.RetryPeriod)
			continue
		case ctx.Err() != nil:
			return false, nil
		case err == nil:
			e.log.Warn("another spoke took the lease", "holder", e.holderOf(e.lease))
			return false, nil
		}
		left = e.renewedAt.Add(e.cfg.RenewDeadline).Sub(e.clock.Now())
		if left <= 0 {
			e.log.Warn("could not renew the lease within the renew deadline", "err", err)
			return false, nil
		}
		e.log.Debug("cannot renew the lease; retrying", "err", err, "retry_in", min(left, e.cfg.RetryPeriod))
		t.Reset(min(left, e.cfg.RetryPeriod))
	}
}

// tryAcquireOrRenew reads the Lease and writes this elector in as its
// holder, unless another holder's lease is still valid (false and a nil
// error). now is when the attempt began.
func (e *Elector) tryAcquireOrRenew(ctx context.Context, now time.Time) (bool, error) {
	ns, name := e.cfg.Namespace, e.cfg.LeaseName
	lease, err := e.client.Get(ctx, ns, name)
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: e.spec(nil, now)}
		if lease, err = e.client.Create(ctx, lease); err != nil {
			return false, fmt.Errorf("create lease %s/%s: %w", ns, name, err)
		}
		e.observe(lease, now)
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get lease %s/%s: %w", ns, name, err)
	}
	e.observe(lease, now)
	if holder := e.holderOf(lease); holder != "" && holder != e.cfg.Identity && e.observedAt.Add(e.durationOf(lease)).After(now) {
		return false, nil
	}
	lease = lease.DeepCopy()
	lease.Spec = e.spec(&lease.Spec, now)
	if lease, err = e.client.Update(ctx, lease); err != nil {
		return false, fmt.Errorf("update lease %s/%s: %w", ns, name, err)
	}
	e.observe(lease, now)
	return true, nil
}

// spec returns the Lease's spec with this elector holding it since now,
// or since it took it when prev names it already.
func (e *Elector) spec(prev *coordinationv1.LeaseSpec, now time.Time) coordinationv1.LeaseSpec {
	at := metav1.NewMicroTime(now)
	s := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(e.cfg.Identity),
		LeaseDurationSeconds: ptr.To(int32(e.cfg.LeaseDuration / time.Second)),
		AcquireTime:          &at,
		RenewTime:            &at,
		LeaseTransitions:     ptr.To[int32](0),
	}
	if prev == nil {
		return s
	}
	s.Strategy, s.PreferredHolder = prev.Strategy, prev.PreferredHolder
	switch {
	case ptr.Deref(prev.HolderIdentity, "") == e.cfg.Identity:
		s.AcquireTime, s.LeaseTransitions = prev.AcquireTime, prev.LeaseTransitions
	case prev.LeaseTransitions != nil:
		s.LeaseTransitions = ptr.To(*prev.LeaseTransitions + 1)
	}
	return s
}

// observe records lease as the last seen, and when it changed.
func (e *Elector) observe(lease *coordinationv1.Lease, now time.Time) {
	if lease.ResourceVersion != e.observedVersion {
		e.observedVersion, e.observedAt = lease.ResourceVersion, now
	}
	e.lease = lease
}

// release gives up the Lease if this elector holds it: the holder is
// emptied, and a standby takes it at its next try.
func (e *Elector) release(ctx context.Context) {
	if e.lease == nil || e.holderOf(e.lease) != e.cfg.Identity {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
	defer cancel()
	lease := e.lease.DeepCopy()
	at := metav1.NewMicroTime(e.clock.Now())
	lease.Spec.HolderIdentity = ptr.To("")
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &at, &at
	if _, err := e.client.Update(ctx, lease); err != nil {
		e.log.Warn("cannot release the lease; a standby takes over once it expires", "err", err)
		return
	}
	e.lease = nil
	e.log.Info("lease released")
}

func (e *Elector) holderOf(lease *coordinationv1.Lease) string {
	if lease == nil {
		return ""
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

func (e *Elector) durationOf(lease *coordinationv1.Lease) time.Duration {
	if s := ptr.Deref(lease.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return e.cfg.LeaseDuration
}

// sleep waits for d, false when ctx ends first.
func (e *Elector) sleep(ctx context.Context, d time.Duration) bool {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
