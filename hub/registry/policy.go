package registry

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/policy"
)

// SetPolicy puts a cluster policy in force (nil: none). The clusters it
// names become members the hub waits for; a cluster it no longer names
// loses its stream (its spoke's next one is refused) and then its lease
// runs out as for any spoke that has gone. What the hub holds of each
// cluster is checked against the new policy at once: objects it no longer
// allows are dropped, as if their spoke had removed them, and a cluster
// whose own network or trust domain it no longer allows is withdrawn and
// its stream cut, so that its spoke must send its full state again (which
// the policy then checks). It returns what it dropped, for the log.
func (r *Registry) SetPolicy(p *policy.Policy) []Enforcement {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policy.Store(p)
	if p == nil {
		return nil
	}
	r.expectLocked(p.Clusters(), p, math.MaxInt)
	var out []Enforcement
	for id, s := range r.shards {
		c := p.Cluster(id)
		if c == nil {
			if s.status.Connected {
				r.cutLocked(s)
				out = append(out, Enforcement{Cluster: id, Reason: "the cluster policy no longer names the cluster: its stream is cut"})
			}
			continue
		}
		if e, ok := r.enforceLocked(s, c); ok {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Enforcement) int { return cmp.Compare(a.Cluster, b.Cluster) })
	r.statusChangedLocked()
	r.wakeLeasesLocked() // leases may have changed
	return out
}

// Enforcement is what a new policy took from a cluster.
type Enforcement struct {
	Cluster federation.ClusterID
	// Dropped counts the objects dropped (services, endpoints, workloads,
	// gateways); Withdrawn, that nothing of the cluster stays.
	Dropped   int
	Withdrawn bool
	Reason    string // the first object refused and why
}

// cutLocked takes a cluster's shard from its stream as a newer stream
// would: the stream ends, and nothing can write through its Conn. Callers
// hold r.mu.
func (r *Registry) cutLocked(s *shard) {
	if s.superseded != nil {
		close(s.superseded)
		s.superseded = nil
	}
	r.disconnectLocked(s)
}

// enforceLocked drops what c does not allow from what the hub holds of s.
// Callers hold r.mu.
func (r *Registry) enforceLocked(s *shard, c *policy.Cluster) (Enforcement, bool) {
	if s.cluster == nil {
		return Enforcement{}, false
	}
	e := Enforcement{Cluster: s.id}
	refuse := func(err error) bool {
		if err != nil && e.Reason == "" {
			e.Reason = err.Error()
		}
		return err != nil
	}
	if refuse(c.CheckCluster(s.cluster)) {
		e.Dropped = len(s.services) + s.nEndpoint + s.workloads.len + len(s.cluster.GetGateways())
		e.Withdrawn = true
		if s.status.Connected {
			r.cutLocked(s)
		}
		r.withdrawLocked(s)
		return e, true
	}
	u := &federationpb.ShardUpdate{}
	var gateways []*federationpb.Gateway
	for i, g := range s.cluster.GetGateways() {
		if !refuse(c.CheckGateway(s.cluster.GetId(), i, g)) {
			gateways = append(gateways, g)
		}
	}
	if n := len(s.cluster.GetGateways()) - len(gateways); n > 0 {
		e.Dropped += n
		u.Cluster = proto.CloneOf(s.cluster)
		u.Cluster.Gateways = gateways
	}
	for k, svc := range s.services {
		if refuse(c.CheckService(svc)) {
			u.RemovedServices = append(u.RemovedServices, k)
		}
	}
	for _, eps := range s.endpoints {
		for _, ep := range eps {
			if pb := ep.Proto(); refuse(c.CheckEndpoint(pb)) { // policy changes are rare: a message each is fine
				u.RemovedEndpoints = append(u.RemovedEndpoints, federation.EndpointKey(pb))
			}
		}
	}
	s.workloads.all(func(w *clusterset.Workload) {
		if refuse(c.CheckWorkload(w.Proto())) {
			u.RemovedWorkloads = append(u.RemovedWorkloads, w.GetUid())
		}
	})
	e.Dropped += len(u.RemovedServices) + len(u.RemovedEndpoints) + len(u.RemovedWorkloads)
	if e.Dropped == 0 {
		return Enforcement{}, false
	}
	r.publishLocked(s.patch(u))
	return e, true
}

// Policy returns the cluster policy in force, or nil.
func (r *Registry) Policy() *policy.Policy { return r.policy.Load() }

// Admit reports why a cluster may not stream to the hub: under a policy,
// because the policy does not name it.
func (r *Registry) Admit(id federation.ClusterID) error {
	if p := r.policy.Load(); p != nil && p.Cluster(id) == nil {
		return fmt.Errorf("the cluster policy does not name cluster %q: %w", id, federation.ErrNotAllowed)
	}
	return nil
}

// LimitsFor returns a cluster's caps: its policy entry's where it sets
// them, else the hub's.
func (r *Registry) LimitsFor(id federation.ClusterID) Limits {
	l := r.limits
	c := r.policyCluster(id)
	if c == nil {
		return l
	}
	for _, o := range []struct {
		v   *int
		out *int
	}{
		{c.Limits.MaxServices, &l.MaxServices},
		{c.Limits.MaxEndpoints, &l.MaxEndpoints},
		{c.Limits.MaxWorkloads, &l.MaxWorkloads},
	} {
		if o.v != nil {
			*o.out = *o.v
		}
	}
	return l
}

// LeasesFor returns a cluster's lease policy: its policy entry's where it
// sets one, else the hub's.
func (r *Registry) LeasesFor(id federation.ClusterID) LeasePolicy {
	l := r.leases
	c := r.policyCluster(id)
	if c == nil {
		return l
	}
	if d := c.Leases.StaleAfter; d != nil {
		l.StaleAfter = d.Duration
	}
	if d := c.Leases.WithdrawAfter; d != nil {
		l.WithdrawAfter = d.Duration
	}
	if l.WithdrawAfter != 0 && l.WithdrawAfter < l.StaleAfter {
		// One of the two from the entry, one from the flags: withdraw
		// no sooner than it turns stale.
		l.WithdrawAfter = l.StaleAfter
	}
	return l
}

func (r *Registry) policyCluster(id federation.ClusterID) *policy.Cluster {
	if p := r.policy.Load(); p != nil {
		return p.Cluster(id)
	}
	return nil
}

// checkPolicy reports what in u the policy does not allow cluster id.
func (r *Registry) checkPolicy(id federation.ClusterID, u *federationpb.ShardUpdate) error {
	p := r.policy.Load()
	if p == nil {
		return nil
	}
	c := p.Cluster(id)
	if c == nil {
		return r.Admit(id)
	}
	return c.Check(u)
}
