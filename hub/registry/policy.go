package registry

import (
	"fmt"
	"math"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/policy"
)

// SetPolicy puts a cluster policy in force (nil: none). The clusters it
// names become members the hub waits for; a cluster it no longer names
// loses its stream (its spoke's next one is refused) and then its lease
// runs out as for any spoke that has gone. What clusters sent before
// stays until they send it again: the policy checks what arrives.
func (r *Registry) SetPolicy(p *policy.Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policy.Store(p)
	if p == nil {
		return
	}
	r.expectLocked(p.Clusters(), p, math.MaxInt)
	for id, s := range r.shards {
		if p.Cluster(id) == nil && s.superseded != nil && s.status.Connected {
			// Taking the shard from its stream as a newer stream would: the
			// stream ends, and nothing can write through its Conn.
			close(s.superseded)
			s.superseded = nil
			s.gen++
			s.status.Connected = false
			s.status.DisconnectedAt = r.now()
		}
	}
	r.statusChangedLocked()
	r.wakeLeasesLocked() // leases may have changed
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
