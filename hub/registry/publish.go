package registry

import (
	"maps"
	"slices"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
)

// publishLocked publishes a snapshot with the changes of one shard (or
// only cluster facts). Callers hold r.mu.
func (r *Registry) publishLocked(ch changeSet) {
	prev := r.current.Load()
	next := &snapshot{
		revision: prev.revision + 1, done: make(chan struct{}),
		clusters: prev.clusters, clusterList: prev.clusterList, gateways: prev.gateways, imports: prev.imports,
	}
	next.changes.Observed = ch.observed
	if ch.clusters {
		// Clusters are few: rebuild them whenever one changes.
		clusters := make(map[federation.ClusterID]*clusterset.ClusterInfo, len(r.shards))
		for id, s := range r.shards {
			if s.cluster != nil && s.status.State != clusterset.Withdrawn {
				clusters[id] = &clusterset.ClusterInfo{
					ID:          id,
					Network:     s.network(),
					TrustDomain: s.cluster.GetTrustDomain(),
					Gateways:    s.cluster.GetGateways(),
					State:       s.status.State,
				}
			}
		}
		next.setClusters(clusters)
		next.changes.Clusters = true
	}
	if ch.all || ch.allServices {
		s := r.shards[ch.cluster]
		for k := range s.services {
			ch.service(k)
		}
		if ch.all {
			// The shard's network changed: retag everything it holds.
			s.workloads.all(func(w *clusterset.Workload) { ch.workload(w.GetUid()) })
		}
	}
	next.services = r.mergeServices(&prev.services, ch.services, &next.changes)
	next.workloads, next.nWorkloads = prev.workloads, prev.nWorkloads
	if len(ch.workloads) > 0 {
		s := r.shards[ch.cluster]
		next.workloads = maps.Clone(prev.workloads)
		next.workloads[ch.cluster] = s.workloads
		next.nWorkloads += s.workloads.len - prev.workloads[ch.cluster].len
		next.changes.Workloads = workloadKeys(s, ch.workloads)
	}
	r.resolveImportsLocked(next, ch.held)
	if len(next.changes.Services) == 0 && len(next.changes.Workloads) == 0 && !next.changes.Clusters {
		return // nothing a reader could see changed
	}
	prev.next = next
	r.current.Store(next)
	close(prev.done)
}

// mergeServices re-merges the services with the given keys from every shard.
func (r *Registry) mergeServices(base *cowMap[*clusterset.ServiceView], keys map[string]struct{}, out *clusterset.Changes) cowMap[*clusterset.ServiceView] {
	if len(keys) == 0 {
		return *base
	}
	edit := newCowEdit(base)
	for key := range keys {
		var parts []clusterset.ClusterService
		for id, s := range r.shards {
			svc, ok := s.services[key]
			if !ok {
				continue
			}
			parts = append(parts, clusterset.ClusterService{
				Cluster:   id,
				Network:   s.network(),
				Service:   svc,
				Endpoints: s.endpoints[key],
				Stale:     s.status.State == clusterset.Stale,
			})
		}
		if v := clusterset.MergeService(parts); v != nil {
			edit.set(key, v)
		} else {
			edit.delete(key)
		}
		out.Services = append(out.Services, key)
	}
	slices.Sort(out.Services)
	return edit.done()
}

// workloadKeys returns the clusterset keys of a shard's workloads with the
// given uids, sorted.
func workloadKeys(s *shard, uids map[string]struct{}) []string {
	out := make([]string, 0, len(uids))
	for uid := range uids {
		if w, ok := s.workloads.get(uid); ok {
			out = append(out, w.Key()) // the workload's own string: no key built per workload
		} else {
			out = append(out, clusterset.WorkloadKey(s.id, uid))
		}
	}
	slices.Sort(out)
	return out
}
