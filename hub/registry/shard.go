package registry

import (
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// shard is one cluster's state at the hub. Guarded by Registry.mu.
type shard struct {
	id       federation.ClusterID
	cluster  *federationpb.Cluster // nil until the first full update
	session  string
	version  uint64
	services map[string]*federationpb.Service
	// endpoints holds each service's endpoints tagged and sorted by
	// address: the shard's only index of them (found by binary search),
	// and what snapshots share. A change makes a new slice; published
	// snapshots hold the old.
	endpoints map[string][]clusterset.TaggedEndpoint
	nEndpoint int
	// workloads are the shard's workloads by uid: the same index the
	// snapshots hold (they hold no other), so edits go through a
	// workloadsEdit and leave published ones alone.
	workloads workloads
	// tags are the shard's tags, made anew when its network changes:
	// every endpoint and workload of one network shares one.
	tags *clusterset.Tags

	gen        uint64 // generation of the owning Conn
	superseded chan struct{}
	// holder is the spoke of the newest stream; displaced are spokes
	// whose live streams a spoke of another session took over, and that
	// may not take the cluster back while it streams.
	holder    spokeID
	displaced map[string]*displacedSpoke // by session
	status    ClusterStatus
	intern    *clusterset.Interner
	// importer: the spoke of the current stream writes imports into its
	// cluster. held is what it last reported its cluster holds of them
	// (kept across streams: it is the cluster's, not the stream's).
	importer bool
	held     map[string]*federationpb.HeldImport
}

func newShard(id federation.ClusterID) *shard {
	return &shard{
		id:        id,
		services:  map[string]*federationpb.Service{},
		endpoints: map[string][]clusterset.TaggedEndpoint{},
		intern:    clusterset.NewInterner(),
	}
}

// workload returns the workload with uid, nil if the shard has none.
func (s *shard) workload(uid string) *clusterset.Workload {
	w, _ := s.workloads.get(uid)
	return w
}

// retagWorkloads gives every workload the tag of the shard's network.
func (s *shard) retagWorkloads() {
	edit := newWorkloadsEdit(&s.workloads)
	s.workloads.all(func(w *clusterset.Workload) { edit.set(s.intern.Retag(s.tags, w)) })
	s.workloads = edit.done()
}

// endpoint returns a service's endpoint at address.
func (s *shard) endpoint(key, address string) (*clusterset.Endpoint, bool) {
	eps := s.endpoints[key]
	i, ok := slices.BinarySearchFunc(eps, address, func(e clusterset.TaggedEndpoint, a string) int { return strings.Compare(e.GetAddress(), a) })
	if !ok {
		return nil, false
	}
	return eps[i].Endpoint, true
}

// editEndpoints applies a delta's endpoint changes of one service to its
// sorted slice, in O(n + k log k) instead of a rebuild. The old slice is
// left alone: published snapshots hold it.
func (s *shard) editEndpoints(key string, upserts []*clusterset.Endpoint, removed map[string]bool) {
	old := s.endpoints[key]
	drop := make(map[string]bool, len(removed)+len(upserts))
	for a := range removed {
		drop[a] = true
	}
	for _, e := range upserts {
		drop[e.GetAddress()] = true
	}
	add := clusterset.SortEndpoints(upserts) // tagged when interned
	out := make([]clusterset.TaggedEndpoint, 0, len(old)+len(add))
	i := 0
	for _, e := range old {
		if drop[e.GetAddress()] {
			continue
		}
		for i < len(add) && add[i].GetAddress() < e.GetAddress() {
			out = append(out, add[i])
			i++
		}
		out = append(out, e)
	}
	if out = append(out, add[i:]...); len(out) == 0 {
		delete(s.endpoints, key)
		return
	}
	s.endpoints[key] = out
}

// retag tags every endpoint of the shard anew, for a new network; the
// order by address stands.
func (s *shard) retag() {
	for key, eps := range s.endpoints {
		out := make([]clusterset.TaggedEndpoint, len(eps))
		for i, e := range eps {
			out[i] = clusterset.TaggedEndpoint{Endpoint: s.intern.RetagEndpoint(s.tags, e.Endpoint)}
		}
		s.endpoints[key] = out
	}
}

func (s *shard) network() federation.NetworkID { return federation.NetworkID(s.cluster.GetNetwork()) }

// changeSet accumulates what an update touched.
type changeSet struct {
	cluster   federation.ClusterID
	services  map[string]struct{}
	workloads map[string]struct{} // shard uids, not yet cluster-qualified
	clusters  bool
	// all marks every service and workload of the shard changed (its
	// network changed).
	all bool
	// allServices marks every service of the shard changed (its lease
	// changed how its endpoints are served).
	allServices bool
	// held are the keys of the imports whose holdings the cluster
	// reported changed.
	held map[string]struct{}
	// observed is when the spoke observed the update's oldest change.
	observed time.Time
}

func (c *changeSet) service(key string) {
	if c.services == nil {
		c.services = map[string]struct{}{}
	}
	c.services[key] = struct{}{}
}

func (c *changeSet) workload(uid string) {
	if c.workloads == nil {
		c.workloads = map[string]struct{}{}
	}
	c.workloads[uid] = struct{}{}
}

// setCluster records new cluster facts.
func (s *shard) setCluster(cl *federationpb.Cluster, ch *changeSet) {
	if s.cluster.EqualVT(cl) {
		return
	}
	prev := s.cluster
	s.cluster = cl
	ch.clusters = true
	if prev == nil || prev.GetNetwork() != cl.GetNetwork() {
		s.tags = clusterset.NewTags(s.id, s.network())
	}
	if prev != nil && prev.GetNetwork() != cl.GetNetwork() {
		ch.all = true
		s.retag()
		s.retagWorkloads()
	}
}

// replace swaps the shard's objects for a full update's, recording only the
// objects that differ.
func (s *shard) replace(u *federationpb.ShardUpdate) changeSet {
	ch := changeSet{cluster: s.id}
	s.setCluster(u.GetCluster(), &ch)

	services := make(map[string]*federationpb.Service, len(u.GetServices()))
	for _, svc := range u.GetServices() {
		k := federation.KeyOfService(svc)
		services[k] = svc
		if old, ok := s.services[k]; !ok || !old.EqualVT(svc) {
			ch.service(k)
		} else {
			services[k] = old // keep the pointer snapshots already share
		}
	}
	for k := range s.services {
		if _, ok := services[k]; !ok {
			ch.service(k)
		}
	}
	s.services = services

	ws := make([]*clusterset.Workload, 0, len(u.GetWorkloads()))
	for _, pb := range u.GetWorkloads() {
		w := s.intern.Workload(s.tags, pb)
		if old, ok := s.workloads.get(w.GetUid()); !ok || !old.Equal(w) {
			ch.workload(w.GetUid())
		} else {
			w = old // the pointer snapshots already share
		}
		ws = append(ws, w)
	}
	next := newWorkloads(ws)
	s.workloads.all(func(w *clusterset.Workload) {
		if _, ok := next.get(w.GetUid()); !ok {
			ch.workload(w.GetUid())
		}
	})
	s.workloads = next

	byService := map[string][]*clusterset.Endpoint{}
	for _, pb := range u.GetEndpoints() {
		sk := federation.ServiceKey(pb.GetNamespace(), pb.GetService())
		ep := s.intern.Endpoint(s.tags, pb, s.workload(pb.GetWorkload().GetUid()))
		if old, ok := s.endpoint(sk, ep.GetAddress()); ok && old.Equal(ep) {
			ep = old // the pointer snapshots already share
		}
		byService[sk] = append(byService[sk], ep)
	}
	endpoints := make(map[string][]clusterset.TaggedEndpoint, len(byService))
	for sk, eps := range byService {
		tagged := clusterset.SortEndpoints(eps) // tagged when interned
		if old := s.endpoints[sk]; slices.Equal(old, tagged) {
			tagged = old // unchanged: the slice snapshots already share
		} else {
			ch.service(sk)
		}
		endpoints[sk] = tagged
	}
	for sk := range s.endpoints {
		if _, ok := endpoints[sk]; !ok {
			ch.service(sk)
		}
	}
	s.endpoints = endpoints
	s.nEndpoint = len(u.GetEndpoints())
	return ch
}

// countAfter returns the shard's sizes after a delta, for limit checks.
func (s *shard) countAfter(u *federationpb.ShardUpdate) (services, endpoints, workloads int) {
	services, endpoints, workloads = len(s.services), s.nEndpoint, s.workloads.len
	for _, svc := range u.GetServices() {
		if _, ok := s.services[federation.KeyOfService(svc)]; !ok {
			services++
		}
	}
	for _, k := range u.GetRemovedServices() {
		if _, ok := s.services[k]; ok {
			services--
		}
	}
	for _, ep := range u.GetEndpoints() {
		if _, ok := s.endpoint(federation.ServiceKey(ep.GetNamespace(), ep.GetService()), ep.GetAddress()); !ok {
			endpoints++
		}
	}
	for _, k := range u.GetRemovedEndpoints() {
		if _, ok := s.endpoint(federation.SplitEndpointKey(k)); ok {
			endpoints--
		}
	}
	for _, w := range u.GetWorkloads() {
		if _, ok := s.workloads.get(w.GetUid()); !ok {
			workloads++
		}
	}
	for _, k := range u.GetRemovedWorkloads() {
		if _, ok := s.workloads.get(k); ok {
			workloads--
		}
	}
	return services, endpoints, workloads
}

// patch applies a delta in place.
func (s *shard) patch(u *federationpb.ShardUpdate) changeSet {
	ch := changeSet{cluster: s.id}
	if cl := u.GetCluster(); cl != nil {
		s.setCluster(cl, &ch)
	}
	for _, k := range u.GetRemovedServices() {
		if _, ok := s.services[k]; ok {
			delete(s.services, k)
			ch.service(k)
		}
	}
	for _, svc := range u.GetServices() {
		k := federation.KeyOfService(svc)
		if !s.services[k].EqualVT(svc) {
			s.services[k] = svc
			ch.service(k)
		}
	}
	if len(u.GetRemovedWorkloads()) > 0 || len(u.GetWorkloads()) > 0 {
		workloads := newWorkloadsEdit(&s.workloads)
		for _, uid := range u.GetRemovedWorkloads() {
			if workloads.get(uid) != nil {
				workloads.delete(uid)
				ch.workload(uid)
			}
		}
		for _, pb := range u.GetWorkloads() {
			if w := s.intern.Workload(s.tags, pb); !workloads.get(w.GetUid()).Equal(w) {
				workloads.set(w)
				ch.workload(w.GetUid())
			}
		}
		s.workloads = workloads.done()
	}
	type edit struct {
		upserts []*clusterset.Endpoint
		removed map[string]bool // addresses
	}
	edits := map[string]*edit{}
	editOf := func(sk string) *edit {
		e := edits[sk]
		if e == nil {
			e = &edit{removed: map[string]bool{}}
			edits[sk] = e
		}
		return e
	}
	for _, ek := range u.GetRemovedEndpoints() {
		sk, a := federation.SplitEndpointKey(ek)
		if _, ok := s.endpoint(sk, a); ok {
			s.nEndpoint--
			ch.service(sk)
			editOf(sk).removed[a] = true
		}
	}
	for _, pb := range u.GetEndpoints() {
		sk := federation.ServiceKey(pb.GetNamespace(), pb.GetService())
		ep := s.intern.Endpoint(s.tags, pb, s.workload(pb.GetWorkload().GetUid()))
		old, ok := s.endpoint(sk, ep.GetAddress())
		if !ok {
			s.nEndpoint++
		}
		if !ok || !old.Equal(ep) {
			ch.service(sk)
			editOf(sk).upserts = append(editOf(sk).upserts, ep)
		}
	}
	for sk, e := range edits {
		s.editEndpoints(sk, e.upserts, e.removed)
	}
	return ch
}
