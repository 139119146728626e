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

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Clusterset is a clusterset under construction. It is not safe for
// concurrent use; its snapshots are.
type Clusterset struct {
	clusters  map[federation.ClusterID]*federation.ClusterInfo
	exports   map[string]map[federation.ClusterID]*federation.ClusterService // service key → cluster → export
	workloads map[string]federation.TaggedWorkload
	pending   federation.Changes
	last      *Snapshot
}

// New returns an empty clusterset.
func New() *Clusterset {
	return &Clusterset{
		clusters:  map[federation.ClusterID]*federation.ClusterInfo{},
		exports:   map[string]map[federation.ClusterID]*federation.ClusterService{},
		workloads: map[string]federation.TaggedWorkload{},
		last:      &Snapshot{done: make(chan struct{}), services: map[string]*federation.ServiceView{}, workloads: map[string]federation.TaggedWorkload{}},
	}
}

// SetCluster adds or replaces a cluster's facts.
func (c *Clusterset) SetCluster(info federation.ClusterInfo) {
	c.clusters[info.ID] = &info
	c.pending.Clusters = true
}

// SetService sets a cluster's export of a service and its endpoints,
// tagged with the cluster's network (SetCluster first).
func (c *Clusterset) SetService(cluster federation.ClusterID, svc *federationpb.Service, eps ...*federationpb.Endpoint) {
	key := federation.KeyOfService(svc)
	if c.exports[key] == nil {
		c.exports[key] = map[federation.ClusterID]*federation.ClusterService{}
	}
	network := c.clusters[cluster].Network
	tagged := federation.TagEndpoints(federation.NewTags(cluster, network), federation.NewEndpoints(eps...)) // sorted by address
	c.exports[key][cluster] = &federation.ClusterService{Cluster: cluster, Network: network, Service: svc, Endpoints: tagged}
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
	key := federation.WorkloadKey(cluster, w.GetUid())
	c.workloads[key] = federation.NewInterner().Workload(federation.NewTags(cluster, c.clusters[cluster].Network), w).Tagged()
	c.pending.Workloads = append(c.pending.Workloads, key)
}

// RemoveWorkload removes a cluster's workload.
func (c *Clusterset) RemoveWorkload(cluster federation.ClusterID, uid string) {
	key := federation.WorkloadKey(cluster, uid)
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
		workloads: maps.Clone(c.workloads),
		changes:   c.pending,
	}
	for _, info := range c.clusters {
		s.clusters = append(s.clusters, info)
	}
	slices.SortFunc(s.clusters, func(a, b *federation.ClusterInfo) int { return cmp.Compare(a.ID, b.ID) })
	for _, key := range c.pending.Services {
		var parts []federation.ClusterService
		for _, p := range c.exports[key] {
			parts = append(parts, *p)
		}
		if v := federation.MergeService(parts); v != nil {
			s.services[key] = v
		} else {
			delete(s.services, key)
		}
	}
	c.pending = federation.Changes{}
	c.last = s
	prev.next = s
	close(prev.done)
	return s
}

// Snapshot is an immutable clusterset.
type Snapshot struct {
	revision  uint64
	clusters  []*federation.ClusterInfo
	services  map[string]*federation.ServiceView
	workloads map[string]federation.TaggedWorkload
	changes   federation.Changes
	done      chan struct{}
	next      *Snapshot
}

// Revision counts the snapshots published before this one.
func (s *Snapshot) Revision() uint64 { return s.revision }

// Clusters returns every cluster, sorted by ID.
func (s *Snapshot) Clusters() []*federation.ClusterInfo { return s.clusters }

// Services returns every service, sorted by key.
func (s *Snapshot) Services() []*federation.ServiceView {
	out := make([]*federation.ServiceView, 0, len(s.services))
	for _, k := range slices.Sorted(maps.Keys(s.services)) {
		out = append(out, s.services[k])
	}
	return out
}

// Service returns a service by key.
func (s *Snapshot) Service(key string) (*federation.ServiceView, bool) {
	v, ok := s.services[key]
	return v, ok
}

// Workload returns a workload by key (cluster/uid).
func (s *Snapshot) Workload(key string) (federation.TaggedWorkload, bool) {
	w, ok := s.workloads[key]
	return w, ok
}

// Workloads returns every workload, sorted by key.
func (s *Snapshot) Workloads() []federation.TaggedWorkload {
	out := make([]federation.TaggedWorkload, 0, len(s.workloads))
	for _, k := range slices.Sorted(maps.Keys(s.workloads)) {
		out = append(out, s.workloads[k])
	}
	return out
}

// Changes says what changed since the previous snapshot.
func (s *Snapshot) Changes() federation.Changes { return s.changes }

// Done is closed once a newer snapshot is published.
func (s *Snapshot) Done() <-chan struct{} { return s.done }

// Next returns the newer snapshot once Done is closed, else nil.
func (s *Snapshot) Next() *Snapshot {
	select {
	case <-s.done:
		return s.next
	default:
		return nil
	}
}
