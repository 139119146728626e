// Package xdstest builds clustersets for the tests of the xDS packages,
// without the hub's registry (which the xDS packages do not import): a
// Clusterset is edited cluster by cluster and published as immutable
// snapshots, each saying what changed since the previous one and linked
// to the next as the registry's snapshots are.
package xdstest

import (
	"cmp"
	"maps"
	"slices"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Clusterset is a clusterset under construction. It is not safe for
// concurrent use; its snapshots are.
type Clusterset struct {
	clusters  map[federation.ClusterID]*clusterset.ClusterInfo
	exports   map[string]map[federation.ClusterID]*clusterset.ClusterService // service key → cluster → export
	imports   map[string]clusterset.Import
	workloads map[string]clusterset.TaggedWorkload
	pending   clusterset.Changes
	last      *Snapshot
}

// New returns an empty clusterset.
func New() *Clusterset {
	return &Clusterset{
		clusters:  map[federation.ClusterID]*clusterset.ClusterInfo{},
		exports:   map[string]map[federation.ClusterID]*clusterset.ClusterService{},
		imports:   map[string]clusterset.Import{},
		workloads: map[string]clusterset.TaggedWorkload{},
		last: &Snapshot{
			done: make(chan struct{}), gateways: clusterset.NewGateways(nil),
			services: map[string]*clusterset.ServiceView{}, imports: map[string]clusterset.Import{}, workloads: map[string]clusterset.TaggedWorkload{},
		},
	}
}

// SetCluster adds or replaces a cluster's facts.
func (c *Clusterset) SetCluster(info clusterset.ClusterInfo) {
	c.clusters[info.ID] = &info
	c.pending.Clusters = true
}

// SetService sets a cluster's export of a service and its endpoints,
// tagged with the cluster's network (SetCluster first).
func (c *Clusterset) SetService(cluster federation.ClusterID, svc *federationpb.Service, eps ...*federationpb.Endpoint) {
	key := federation.KeyOfService(svc)
	if c.exports[key] == nil {
		c.exports[key] = map[federation.ClusterID]*clusterset.ClusterService{}
	}
	network := c.clusters[cluster].Network
	tagged := clusterset.TagEndpoints(clusterset.NewTags(cluster, network), clusterset.NewEndpoints(eps...)) // sorted by address
	c.exports[key][cluster] = &clusterset.ClusterService{Cluster: cluster, Network: network, Service: svc, Endpoints: tagged}
	c.pending.Services = append(c.pending.Services, key)
}

// SetImport sets the hub's decisions on the import of service key (zero:
// none).
func (c *Clusterset) SetImport(key string, imp clusterset.Import) {
	c.imports[key] = imp
	c.pending.Services = append(c.pending.Services, key)
}

// RemoveService removes a cluster's export of a service.
func (c *Clusterset) RemoveService(cluster federation.ClusterID, key string) {
	delete(c.exports[key], cluster)
	if len(c.exports[key]) == 0 {
		delete(c.exports, key)
	}
	c.pending.Services = append(c.pending.Services, key)
}

// SetWorkload adds or replaces a cluster's workload.
func (c *Clusterset) SetWorkload(cluster federation.ClusterID, w *federationpb.Workload) {
	key := clusterset.WorkloadKey(cluster, w.GetUid())
	c.workloads[key] = clusterset.NewInterner().Workload(clusterset.NewTags(cluster, c.clusters[cluster].Network), w).Tagged()
	c.pending.Workloads = append(c.pending.Workloads, key)
}

// RemoveWorkload removes a cluster's workload.
func (c *Clusterset) RemoveWorkload(cluster federation.ClusterID, uid string) {
	key := clusterset.WorkloadKey(cluster, uid)
	delete(c.workloads, key)
	c.pending.Workloads = append(c.pending.Workloads, key)
}

// Publish returns a snapshot of the clusterset with the changes since the
// previous one, and makes it the previous one's Next.
func (c *Clusterset) Publish() *Snapshot {
	prev := c.last
	s := &Snapshot{
		revision:  prev.revision + 1,
		done:      make(chan struct{}),
		services:  maps.Clone(prev.services),
		imports:   maps.Clone(c.imports),
		workloads: maps.Clone(c.workloads),
		changes:   c.pending,
	}
	for _, info := range c.clusters {
		s.clusters = append(s.clusters, info)
	}
	slices.SortFunc(s.clusters, func(a, b *clusterset.ClusterInfo) int { return cmp.Compare(a.ID, b.ID) })
	s.gateways = clusterset.NewGateways(s.clusters)
	for _, key := range c.pending.Services {
		var parts []clusterset.ClusterService
		for _, p := range c.exports[key] {
			parts = append(parts, *p)
		}
		if v := clusterset.MergeService(parts); v != nil {
			s.services[key] = v
		} else {
			delete(s.services, key)
		}
	}
	c.pending = clusterset.Changes{}
	c.last = s
	prev.next = s
	close(prev.done)
	return s
}

// Snapshot is an immutable clusterset.
type Snapshot struct {
	revision  uint64
	clusters  []*clusterset.ClusterInfo
	gateways  *clusterset.Gateways
	services  map[string]*clusterset.ServiceView
	imports   map[string]clusterset.Import
	workloads map[string]clusterset.TaggedWorkload
	changes   clusterset.Changes
	done      chan struct{}
	next      *Snapshot
}

// Revision counts the snapshots published before this one.
func (s *Snapshot) Revision() uint64 { return s.revision }

var _ clusterset.Snapshot = (*Snapshot)(nil)

// Clusters returns every cluster, sorted by ID.
func (s *Snapshot) Clusters() []*clusterset.ClusterInfo { return s.clusters }

// Cluster returns a cluster by ID.
func (s *Snapshot) Cluster(id federation.ClusterID) (*clusterset.ClusterInfo, bool) {
	i, ok := slices.BinarySearchFunc(s.clusters, id, func(c *clusterset.ClusterInfo, id federation.ClusterID) int { return cmp.Compare(c.ID, id) })
	if !ok {
		return nil, false
	}
	return s.clusters[i], true
}

// Gateways are the clusters' east-west gateways.
func (s *Snapshot) Gateways() *clusterset.Gateways { return s.gateways }

// ServiceCount is the number of services.
func (s *Snapshot) ServiceCount() int { return len(s.services) }

// Import returns the decisions on the import of service key.
func (s *Snapshot) Import(key string) clusterset.Import { return s.imports[key] }

// WorkloadCount is the number of workloads.
func (s *Snapshot) WorkloadCount() int { return len(s.workloads) }

// Services returns every service, sorted by key.
func (s *Snapshot) Services() []*clusterset.ServiceView {
	out := make([]*clusterset.ServiceView, 0, len(s.services))
	for _, k := range slices.Sorted(maps.Keys(s.services)) {
		out = append(out, s.services[k])
	}
	return out
}

// Service returns a service by key.
func (s *Snapshot) Service(key string) (*clusterset.ServiceView, bool) {
	v, ok := s.services[key]
	return v, ok
}

// Workload returns a workload by key (cluster/uid).
func (s *Snapshot) Workload(key string) (clusterset.TaggedWorkload, bool) {
	w, ok := s.workloads[key]
	return w, ok
}

// Workloads returns every workload, sorted by key.
func (s *Snapshot) Workloads() []clusterset.TaggedWorkload {
	out := make([]clusterset.TaggedWorkload, 0, len(s.workloads))
	for _, k := range slices.Sorted(maps.Keys(s.workloads)) {
		out = append(out, s.workloads[k])
	}
	return out
}

// Changes says what changed since the previous snapshot.
func (s *Snapshot) Changes() clusterset.Changes { return s.changes }

// Done is closed once a newer snapshot is published.
func (s *Snapshot) Done() <-chan struct{} { return s.done }

// Next returns the newer snapshot once Done is closed, else nil.
func (s *Snapshot) Next() clusterset.Snapshot {
	select {
	case <-s.done:
		return s.next
	default:
		return nil
	}
}
