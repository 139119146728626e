package registry

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/clustersetip"
	"github.com/meshfed/meshfed/hub/policy"
)

// Limits caps each cluster's shard. Zero means no cap.
type Limits struct {
	MaxServices  int
	MaxEndpoints int
	MaxWorkloads int
}

// LeasePolicy says how long the clusterset keeps serving a cluster whose
// spoke has gone: it turns stale StaleAfter after its stream ended, and is
// withdrawn WithdrawAfter after (0: never).
type LeasePolicy struct {
	StaleAfter, WithdrawAfter time.Duration
}

// DefaultLeasePolicy rides out a spoke restart or a brief partition at full
// priority, and keeps a lost cluster's endpoints as a last resort for ten
// minutes: long enough for an operator to notice, short enough that its
// pods' addresses are unlikely to have been reused.
var DefaultLeasePolicy = LeasePolicy{StaleAfter: 30 * time.Second, WithdrawAfter: 10 * time.Minute}

// Validate reports a policy that cannot be applied.
func (p LeasePolicy) Validate() error {
	if p.StaleAfter < 0 || p.WithdrawAfter < 0 {
		return fmt.Errorf("lease durations cannot be negative (stale after %v, withdraw after %v)", p.StaleAfter, p.WithdrawAfter)
	}
	if p.WithdrawAfter != 0 && p.WithdrawAfter < p.StaleAfter {
		return fmt.Errorf("withdraw after %v comes before stale after %v", p.WithdrawAfter, p.StaleAfter)
	}
	return nil
}

// Config configures a registry.
type Config struct {
	// Limits and Leases apply to every cluster whose policy entry sets
	// no other.
	Limits Limits
	Leases LeasePolicy
	// Policy bounds what each cluster may publish (nil: no policy, every
	// cluster is admitted and may publish anything valid). SetPolicy
	// replaces it.
	Policy *policy.Policy
	// Clock drives the leases (nil: the real clock).
	Clock clock.Clock
	// ClustersetPools are the CIDRs of MCS ClusterSetIPs (zero:
	// clustersetip.DefaultCIDRs).
	ClustersetPools clustersetip.Pools
	// Log receives a line each time a cluster's lease changes (nil: none).
	Log *slog.Logger
}

// Registry holds every cluster's shard and publishes clusterset snapshots.
type Registry struct {
	limits Limits
	leases LeasePolicy
	clock  clock.Clock
	now    func() time.Time
	log    *slog.Logger

	mu     sync.Mutex // serialises writers; readers use current
	shards map[federation.ClusterID]*shard
	// statusChanged is closed when a cluster's status changes (a
	// connection without data publishes no snapshot). It is made only
	// when someone watches: every accepted update changes a status.
	statusChanged chan struct{}
	// leaseWake is closed when a stream opens or ends, for RunLeases. It
	// is made only when RunLeases waits.
	leaseWake chan struct{}
	// membersChanged is closed when the membership changes (a cluster
	// added or withdrawn); made only when someone watches.
	membersChanged chan struct{}
	// members caches WatchMembers' answer until the membership changes:
	// every spoke's stream holds it, and at a thousand clusters a copy
	// each would be 16 MB.
	members []federation.ClusterID
	// membershipKnown: a spoke or the cluster policy has named the
	// clusterset's members (see Expect). Until then the hub cannot tell
	// a first start from a restart that only some spokes have reached.
	membershipKnown bool

	current atomic.Pointer[snapshot]
	// policy is read without r.mu by Apply's checks and written under it.
	policy atomic.Pointer[policy.Policy]

	imports importsState
}

// New returns an empty registry.
func New(cfg Config) *Registry {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ClustersetPools == (clustersetip.Pools{}) {
		cfg.ClustersetPools, _ = clustersetip.ParsePools(clustersetip.DefaultCIDRs)
	}
	r := &Registry{
		limits: cfg.Limits, leases: cfg.Leases, clock: cfg.Clock, now: cfg.Clock.Now, log: cfg.Log, shards: map[federation.ClusterID]*shard{},
		imports: importsState{
			pools:     cfg.ClustersetPools,
			ipImports: map[string]clustersetip.Import{},
			all:       map[string]struct{}{},
			assigned:  map[string]clustersetip.Result{},
		},
	}
	r.current.Store(emptySnapshot())
	if cfg.Policy != nil {
		r.SetPolicy(cfg.Policy)
	}
	return r
}

// Current returns the current snapshot. It never blocks.
func (r *Registry) Current() clusterset.Snapshot { return r.current.Load() }

func (r *Registry) checkLimits(id federation.ClusterID, services, endpoints, workloads int) error {
	l := r.LimitsFor(id)
	for _, c := range []struct {
		kind     string
		n, limit int
	}{
		{"services", services, l.MaxServices},
		{"endpoints", endpoints, l.MaxEndpoints},
		{"workloads", workloads, l.MaxWorkloads},
	} {
		if c.limit > 0 && c.n > c.limit {
			return fmt.Errorf("cluster %q: %d %s exceed the hub's cap of %d per cluster: %w", id, c.n, c.kind, c.limit, federation.ErrOverLimit)
		}
	}
	return nil
}
