package registry

import (
	"cmp"
	"slices"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
)

// ClusterStatus reports a cluster's connection, lease and shard, for
// operators.
type ClusterStatus struct {
	ID          federation.ClusterID `json:"id"`
	Network     string               `json:"network"`
	TrustDomain string               `json:"trustDomain,omitempty"`
	// State is the cluster's lease: live, stale or withdrawn.
	State      clusterset.ClusterState `json:"state"`
	StateSince time.Time               `json:"stateSince"`
	// LastSeen is when the hub last heard from the spoke: now while its
	// stream is up, else when the stream ended.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// StaleAt and WithdrawAt are when the lease will change, while the
	// spoke is gone.
	StaleAt    time.Time `json:"staleAt,omitzero"`
	WithdrawAt time.Time `json:"withdrawAt,omitzero"`
	// Expected: the cluster is a member the hub learned of (from another
	// spoke or the cluster policy) but has not heard from since it started.
	Expected       bool      `json:"expected,omitempty"`
	Connected      bool      `json:"connected"`
	ConnectedSince time.Time `json:"connectedSince,omitzero"`
	DisconnectedAt time.Time `json:"disconnectedAt,omitzero"`
	Session        string    `json:"session,omitempty"`
	Build          string    `json:"build,omitempty"`
	ShardVersion   uint64    `json:"shardVersion"`
	LastAck        time.Time `json:"lastAck,omitzero"`
	LastNack       time.Time `json:"lastNack,omitzero"`
	LastNackReason string    `json:"lastNackReason,omitempty"`
	Nacks          uint64    `json:"nacks"`
	// LastChangeAt is when the hub applied the newest update that carried
	// a change, and LastChangeObservedAt when the spoke saw that update's
	// oldest change (ShardUpdate.observed_time, read in the hub's clock
	// through the offset estimated on the spoke's stream). The
	// difference is how long the change took to reach the hub: unlike the
	// age of LastAck, it does not grow while an idle cluster stays in sync.
	LastChangeAt         time.Time `json:"lastChangeAt,omitzero"`
	LastChangeObservedAt time.Time `json:"lastChangeObservedAt,omitzero"`
	// PolicyRefusals counts updates refused because the cluster policy
	// does not allow something in them (each also a Nack).
	PolicyRefusals uint64 `json:"policyRefusals"`
	// Peer is the address of the current (or last) stream's spoke.
	Peer string `json:"peer,omitempty"`
	// Supersessions counts streams taken over by a spoke of another
	// session while they were up (a spoke pod replaced, or a second spoke).
	Supersessions uint64 `json:"supersessions"`
	// DuplicateRefusals counts streams refused because their spoke had
	// been displaced by another that still streams.
	DuplicateRefusals uint64 `json:"duplicateRefusals"`
	// Duplicate names the two spokes while a displaced spoke keeps trying
	// to stream for the cluster (within a minute of its last try).
	Duplicate string `json:"duplicate,omitempty"`
	Services  int    `json:"services"`
	Endpoints int    `json:"endpoints"`
	Workloads int    `json:"workloads"`
	Gateways  int    `json:"gateways"`
}

// Status returns every cluster's status, sorted by ID.
func (r *Registry) Status() []ClusterStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statusLocked()
}

// WatchStatus returns every cluster's status, sorted by ID, and a channel
// closed when it next changes.
func (r *Registry) WatchStatus() ([]ClusterStatus, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.statusChanged == nil {
		r.statusChanged = make(chan struct{})
	}
	return r.statusLocked(), r.statusChanged
}

// statusChangedLocked wakes the status watchers. Callers hold r.mu.
func (r *Registry) statusChangedLocked() {
	if r.statusChanged != nil {
		close(r.statusChanged)
		r.statusChanged = nil
	}
}

func (r *Registry) statusLocked() []ClusterStatus {
	out := make([]ClusterStatus, 0, len(r.shards))
	now := r.now()
	for _, s := range r.shards {
		st := s.status
		switch {
		case st.Connected:
			st.LastSeen = now
		case st.Expected: // never heard from since this hub started
			st.StaleAt, st.WithdrawAt = r.leaseDeadlines(s)
		default:
			st.LastSeen = st.DisconnectedAt
			st.StaleAt, st.WithdrawAt = r.leaseDeadlines(s)
		}
		st.ID = s.id
		st.Duplicate = s.duplicate(now)
		st.Network = s.cluster.GetNetwork()
		st.TrustDomain = s.cluster.GetTrustDomain()
		st.Session = s.session
		st.ShardVersion = s.version
		st.Services = len(s.services)
		st.Endpoints = s.nEndpoint
		st.Workloads = s.workloads.len
		st.Gateways = len(s.cluster.GetGateways())
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
