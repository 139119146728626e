package registry

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/federation"
)

// Snapshot is an immutable, versioned view of the clusterset.
type Snapshot struct {
	revision uint64
	clusters map[federation.ClusterID]*federation.ClusterInfo
	services cowMap[*federation.ServiceView]
	// workloads are each cluster's, by uid: its shard's own map.
	workloads  map[federation.ClusterID]workloads
	nWorkloads int
	changes    federation.Changes

	done chan struct{}
	next *Snapshot // set before done is closed
}

func emptySnapshot() *Snapshot {
	return &Snapshot{
		clusters:  map[federation.ClusterID]*federation.ClusterInfo{},
		services:  newCowMap[*federation.ServiceView](serviceBuckets),
		workloads: map[federation.ClusterID]workloads{},
		done:      make(chan struct{}),
	}
}

// Revision increases by one with every published snapshot.
func (s *Snapshot) Revision() uint64 { return s.revision }

// Changes says what changed since the previous revision.
func (s *Snapshot) Changes() federation.Changes { return s.changes }

// Done is closed when a newer snapshot has been published.
func (s *Snapshot) Done() <-chan struct{} { return s.done }

// Next returns the snapshot that replaced s, or nil while s is current.
func (s *Snapshot) Next() *Snapshot {
	select {
	case <-s.done:
		return s.next
	default:
		return nil
	}
}

// Cluster returns what the clusterset knows of a cluster.
func (s *Snapshot) Cluster(id federation.ClusterID) (*federation.ClusterInfo, bool) {
	c, ok := s.clusters[id]
	return c, ok
}

// Clusters returns every known cluster, sorted by ID.
func (s *Snapshot) Clusters() []*federation.ClusterInfo {
	out := make([]*federation.ClusterInfo, 0, len(s.clusters))
	for _, c := range s.clusters {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *federation.ClusterInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Service returns the clusterset service namespace/name.
func (s *Snapshot) Service(key string) (*federation.ServiceView, bool) { return s.services.get(key) }

// ServiceCount is the number of clusterset services.
func (s *Snapshot) ServiceCount() int { return s.services.len }

// Services returns every clusterset service, sorted by key.
func (s *Snapshot) Services() []*federation.ServiceView {
	out := make([]*federation.ServiceView, 0, s.services.len)
	s.services.all(func(_ string, v *federation.ServiceView) { out = append(out, v) })
	slices.SortFunc(out, func(a, b *federation.ServiceView) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Workload returns a workload by its clusterset key (cluster/uid).
func (s *Snapshot) Workload(key string) (federation.TaggedWorkload, bool) {
	cluster, uid, _ := strings.Cut(key, "/") // a cluster ID is a DNS label: no '/'
	m := s.workloads[federation.ClusterID(cluster)]
	w, ok := m.get(uid)
	if !ok {
		return federation.TaggedWorkload{}, false
	}
	return w.Tagged(), true
}

// WorkloadCount is the number of workloads in the clusterset.
func (s *Snapshot) WorkloadCount() int { return s.nWorkloads }

// Workloads returns every workload, sorted by cluster and uid.
func (s *Snapshot) Workloads() []federation.TaggedWorkload {
	out := make([]federation.TaggedWorkload, 0, s.nWorkloads)
	for _, m := range s.workloads {
		m.all(func(w *federation.Workload) { out = append(out, w.Tagged()) })
	}
	slices.SortFunc(out, func(a, b federation.TaggedWorkload) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.GetUid(), b.GetUid()))
	})
	return out
}

// Await returns the first snapshot, starting at s, for which cond holds.
func (s *Snapshot) Await(ctx context.Context, cond func(*Snapshot) bool) (*Snapshot, error) {
	for {
		if cond(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, context.Cause(ctx)
		case <-s.done:
			s = s.next
		}
	}
}
