package clusterset

import (
	"context"

	"github.com/meshfed/meshfed/federation"
)

// Snapshot is an immutable, versioned view of the clusterset. Readers take
// one without locks and wait for the next on Done.
type Snapshot interface {
	// Revision increases by one with every published snapshot.
	Revision() uint64
	// Changes says what changed since the previous revision.
	Changes() Changes
	// Done is closed when a newer snapshot exists; Next returns it then,
	// and nil before.
	Done() <-chan struct{}
	Next() Snapshot

	// Clusters returns every member cluster (withdrawn ones are not),
	// sorted by ID.
	Clusters() []*ClusterInfo
	Cluster(id federation.ClusterID) (*ClusterInfo, bool)
	// Gateways are the members' east-west gateways, by the network they
	// lead into.
	Gateways() *Gateways

	// Services returns every clusterset service, sorted by key
	// (namespace/name).
	Services() []*ServiceView
	Service(key string) (*ServiceView, bool)
	ServiceCount() int
	// Import returns the hub's decisions on the MCS import of the service
	// key: zero for a service that is no import.
	Import(key string) Import

	// Workloads returns every workload, sorted by cluster and uid.
	Workloads() []TaggedWorkload
	// Workload returns a workload by its clusterset key (see WorkloadKey).
	Workload(key string) (TaggedWorkload, bool)
	WorkloadCount() int
}

// Await returns the first snapshot, starting at s, for which cond holds.
func Await(ctx context.Context, s Snapshot, cond func(Snapshot) bool) (Snapshot, error) {
	for {
		if cond(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, context.Cause(ctx)
		case <-s.Done():
			s = s.Next()
		}
	}
}

// Newest follows the chain from s to the newest snapshot published and
// returns it with the changes of every snapshot after s, folded: what a
// reader that skipped them must redo. It returns s and no changes while s
// is the newest.
func Newest(s Snapshot) (Snapshot, Changes) {
	var changes Changes
	for next := s.Next(); next != nil; next = s.Next() {
		s = next
		changes.Fold(s.Changes())
	}
	return s, changes
}
