package registry

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/policy"
)

// RunLeases moves clusters whose spokes have gone through their leases
// (live → stale → withdrawn, see LeasePolicy) until ctx ends. It wakes
// only when a stream opens or ends and when a lease is due.
func (r *Registry) RunLeases(ctx context.Context) {
	for {
		r.mu.Lock()
		next := r.advanceLeasesLocked(r.now())
		if r.leaseWake == nil {
			r.leaseWake = make(chan struct{})
		}
		wake := r.leaseWake
		r.mu.Unlock()

		var due <-chan time.Time
		var stop func() bool
		if !next.IsZero() {
			t := r.clock.NewTimer(next.Sub(r.now()))
			due, stop = t.C(), t.Stop
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-due:
		}
		if stop != nil {
			stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// wakeLeasesLocked tells RunLeases that a stream opened or ended. Callers
// hold r.mu.
func (r *Registry) wakeLeasesLocked() {
	if r.leaseWake != nil {
		close(r.leaseWake)
		r.leaseWake = nil
	}
}

// leaseDeadlines returns when a disconnected cluster turns stale and when
// it is withdrawn; zero for a change that is past or never comes.
func (r *Registry) leaseDeadlines(s *shard) (staleAt, withdrawAt time.Time) {
	if s.status.Connected || s.status.DisconnectedAt.IsZero() {
		return time.Time{}, time.Time{}
	}
	gone := s.status.DisconnectedAt
	leases := r.LeasesFor(s.id)
	if s.status.State == clusterset.Live {
		staleAt = gone.Add(leases.StaleAfter)
	}
	if s.status.State != clusterset.Withdrawn && leases.WithdrawAfter > 0 {
		withdrawAt = gone.Add(leases.WithdrawAfter)
	}
	return staleAt, withdrawAt
}

// advanceLeasesLocked applies the lease changes due at now and returns
// when the next one is (zero: none is pending). Callers hold r.mu.
func (r *Registry) advanceLeasesLocked(now time.Time) time.Time {
	var next time.Time
	soonest := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, s := range r.shards {
		staleAt, withdrawAt := r.leaseDeadlines(s)
		switch {
		case !withdrawAt.IsZero() && !now.Before(withdrawAt):
			r.withdrawLocked(s)
		case !staleAt.IsZero() && !now.Before(staleAt):
			r.setStateLocked(s, clusterset.Stale)
			if s.cluster != nil {
				r.publishLocked(changeSet{cluster: s.id, clusters: true, allServices: true})
			}
			soonest(withdrawAt)
		default:
			soonest(staleAt)
			soonest(withdrawAt)
		}
	}
	return next
}

// setStateLocked moves a cluster's lease. Callers hold r.mu and publish
// what the change means for proxies.
func (r *Registry) setStateLocked(s *shard, state clusterset.ClusterState) {
	if s.status.State == state {
		return
	}
	// A lease that lapses is what an operator must notice: its cluster's
	// endpoints are demoted, then dropped, while nothing else is logged.
	logf := r.log.Warn
	if state == clusterset.Live {
		logf = r.log.Info
	}
	logf("cluster lease changed", "cluster", s.id, "state", state, "previous", s.status.State,
		"elapsed", r.now().Sub(s.status.StateSince).Round(time.Second))
	s.status.State = state
	s.status.StateSince = r.now()
	r.statusChangedLocked()
}

// withdrawLocked drops everything a cluster exported from the clusterset
// and from memory: a spoke that comes back sends its full state again.
// Its status stays, for operators. Callers hold r.mu.
func (r *Registry) withdrawLocked(s *shard) {
	r.setStateLocked(s, clusterset.Withdrawn)
	r.membersChangedLocked()
	ch := changeSet{cluster: s.id, clusters: true}
	for k := range s.services {
		ch.service(k)
	}
	for k := range s.endpoints {
		ch.service(k)
	}
	s.workloads.all(func(w *clusterset.Workload) { ch.workload(w.GetUid()) })
	s.services = map[string]*federationpb.Service{}
	s.endpoints = map[string][]clusterset.TaggedEndpoint{}
	s.nEndpoint = 0
	s.workloads = workloads{}
	s.intern = clusterset.NewInterner()
	s.session, s.version = "", 0
	if s.cluster != nil {
		r.publishLocked(ch)
	}
}

// MaxExpected bounds the clusters one Expect call may add: a spoke names
// the clusterset it last saw, and a fleet larger than this is not one a
// spoke's word should make the hub wait for.
const MaxExpected = 1000

// Expect records clusters the hub should hear from although no stream of
// theirs is open: members of the clusterset before this hub started, as
// another spoke or the cluster policy names them. Each unknown one gets
// an empty shard whose lease runs from now, so that the warm-up waits for
// it and, if it never comes back, it is withdrawn on the usual schedule.
// IDs that are not valid cluster IDs are ignored. It returns how many it
// added. Called with any IDs, it makes the membership known
// ([Registry.MembershipKnown]).
func (r *Registry) Expect(ids []federation.ClusterID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.expectLocked(ids, r.policy.Load(), MaxExpected)
}

// expectLocked is Expect for at most limit clusters. Under a policy, only
// clusters it names are added: a spoke's word cannot make the hub wait for,
// or list, a cluster the policy does not admit. Callers hold r.mu.
func (r *Registry) expectLocked(ids []federation.ClusterID, p *policy.Policy, limit int) int {
	if len(ids) > 0 && !r.membershipKnown {
		r.membershipKnown = true
		r.statusChangedLocked()
	}
	added := 0
	now := r.now()
	for _, id := range ids {
		if added == limit {
			break
		}
		if _, ok := r.shards[id]; ok || len(validation.IsDNS1123Label(string(id))) > 0 {
			continue
		}
		if p != nil && p.Cluster(id) == nil {
			continue
		}
		s := newShard(id)
		s.status.State, s.status.StateSince, s.status.DisconnectedAt = clusterset.Live, now, now
		s.status.Expected = true
		r.shards[id] = s
		added++
	}
	if added > 0 {
		r.statusChangedLocked()
		r.wakeLeasesLocked()
		r.membersChangedLocked()
	}
	return added
}

// MembershipKnown reports whether a spoke (or the cluster policy) has
// named the clusterset's members. A spoke that has never heard from a hub
// names none: a hub that restarted while such a spoke reached it first
// must not take that spoke's cluster for the whole clusterset.
func (r *Registry) MembershipKnown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.membershipKnown
}

// Members returns the clusters of the clusterset, sorted: every cluster
// the hub knows that is not withdrawn, whether or not it has sent its
// shard yet. Spokes keep it, so that a restarted hub learns whom to wait
// for from the first spoke back.
func (r *Registry) Members() []federation.ClusterID {
	m, _ := r.WatchMembers()
	return m
}

// WatchMembers returns Members and a channel closed when they next change.
// The slice is shared by every caller until the membership changes: it
// must not be modified.
func (r *Registry) WatchMembers() ([]federation.ClusterID, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.membersChanged == nil {
		r.membersChanged = make(chan struct{})
	}
	if r.members == nil {
		r.members = r.membersLocked()
	}
	return r.members, r.membersChanged
}

// membersChangedLocked wakes the membership watchers. Callers hold r.mu.
func (r *Registry) membersChangedLocked() {
	r.members = nil
	if r.membersChanged != nil {
		close(r.membersChanged)
		r.membersChanged = nil
	}
}

func (r *Registry) membersLocked() []federation.ClusterID {
	out := make([]federation.ClusterID, 0, len(r.shards))
	for id, s := range r.shards {
		if s.status.State != clusterset.Withdrawn {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
