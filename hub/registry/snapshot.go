package registry

import (
	"cmp"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
)

// snapshot is the registry's clusterset.Snapshot: immutable once
// published, sharing what did not change with its predecessor.
type snapshot struct {
	revision uint64
	clusters map[federation.ClusterID]*clusterset.ClusterInfo
	// clusterList and gateways are built from clusters when they change.
	clusterList []*clusterset.ClusterInfo
	gateways    *clusterset.Gateways
	services    cowMap[*clusterset.ServiceView]
	// imports hold the decisions on the MCS imports that have any.
	imports cowMap[clusterset.Import]
	// workloads are each cluster's, by uid: its shard's own map.
	workloads  map[federation.ClusterID]workloads
	nWorkloads int
	changes    clusterset.Changes

	done chan struct{}
	next *snapshot // set before done is closed
}

var _ clusterset.Snapshot = (*snapshot)(nil)

func emptySnapshot() *snapshot {
	return &snapshot{
		clusters:  map[federation.ClusterID]*clusterset.ClusterInfo{},
		gateways:  clusterset.NewGateways(nil),
		services:  newCowMap[*clusterset.ServiceView](serviceBuckets),
		imports:   newCowMap[clusterset.Import](serviceBuckets),
		workloads: map[federation.ClusterID]workloads{},
		done:      make(chan struct{}),
	}
}

// setClusters makes clusters the snapshot's, with the list and gateways
// built from them. The gateways stay the snapshot's own (inherited) when
// they did not change, so that readers tell a change by the pointer: a
// lease's state changes the clusters far more often than their gateways.
func (s *snapshot) setClusters(clusters map[federation.ClusterID]*clusterset.ClusterInfo) {
	s.clusters = clusters
	s.clusterList = make([]*clusterset.ClusterInfo, 0, len(clusters))
	for _, c := range clusters {
		s.clusterList = append(s.clusterList, c)
	}
	slices.SortFunc(s.clusterList, func(a, b *clusterset.ClusterInfo) int { return cmp.Compare(a.ID, b.ID) })
	if g := clusterset.NewGateways(s.clusterList); !g.Equal(s.gateways) {
		s.gateways = g
	}
}

// Revision increases by one with every published snapshot.
func (s *snapshot) Revision() uint64 { return s.revision }

// Changes says what changed since the previous revision.
func (s *snapshot) Changes() clusterset.Changes { return s.changes }

// Done is closed when a newer snapshot has been published.
func (s *snapshot) Done() <-chan struct{} { return s.done }

// Next returns the snapshot that replaced s, or nil while s is current.
func (s *snapshot) Next() clusterset.Snapshot {
	select {
	case <-s.done:
		return s.next
	default:
		return nil
	}
}

// Cluster returns what the clusterset knows of a cluster.
func (s *snapshot) Cluster(id federation.ClusterID) (*clusterset.ClusterInfo, bool) {
	c, ok := s.clusters[id]
	return c, ok
}

// Clusters returns every member cluster, sorted by ID, shared: do not
// modify it.
func (s *snapshot) Clusters() []*clusterset.ClusterInfo { return s.clusterList }

// Gateways are the members' east-west gateways.
func (s *snapshot) Gateways() *clusterset.Gateways { return s.gateways }

// Service returns the clusterset service namespace/name.
func (s *snapshot) Service(key string) (*clusterset.ServiceView, bool) { return s.services.get(key) }

// ServiceCount is the number of clusterset services.
func (s *snapshot) ServiceCount() int { return s.services.len }

// Services returns every clusterset service, sorted by key.
func (s *snapshot) Services() []*clusterset.ServiceView {
	out := make([]*clusterset.ServiceView, 0, s.services.len)
	s.services.all(func(_ string, v *clusterset.ServiceView) { out = append(out, v) })
	slices.SortFunc(out, func(a, b *clusterset.ServiceView) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Import returns the decisions on the import of the service key.
func (s *snapshot) Import(key string) clusterset.Import {
	imp, _ := s.imports.get(key)
	return imp
}

// Workload returns a workload by its clusterset key (cluster/uid).
func (s *snapshot) Workload(key string) (clusterset.TaggedWorkload, bool) {
	cluster, uid, _ := strings.Cut(key, "/") // a cluster ID is a DNS label: no '/'
	m := s.workloads[federation.ClusterID(cluster)]
	w, ok := m.get(uid)
	if !ok {
		return clusterset.TaggedWorkload{}, false
	}
	return w.Tagged(), true
}

// WorkloadCount is the number of workloads in the clusterset.
func (s *snapshot) WorkloadCount() int { return s.nWorkloads }

// Workloads returns every workload, sorted by cluster and uid.
func (s *snapshot) Workloads() []clusterset.TaggedWorkload {
	out := make([]clusterset.TaggedWorkload, 0, s.nWorkloads)
	for _, m := range s.workloads {
		m.all(func(w *clusterset.Workload) { out = append(out, w.Tagged()) })
	}
	slices.SortFunc(out, func(a, b clusterset.TaggedWorkload) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.GetUid(), b.GetUid()))
	})
	return out
}
