package registry

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/clustersetip"
)

// The registry decides three things about each MCS import (a service some
// cluster exports with a ServiceExport) that no single shard can: its
// ClusterSetIPs, which exports are Ready, and (in clusterset.MergeService)
// its conflicts. The first two are the snapshot's clusterset.Import of
// the service (the conflicts are in its view), so that every reader of a
// snapshot (xDS, the spokes' import streams, the debug views) sees one
// answer.
//
// ClusterSetIPs are assigned by clustersetip.Assign from the imports and
// the IPs the member clusters' ServiceImports hold (each importing spoke
// reports them: Conn.ApplyHeld). Both are the same at every replica once
// the spokes have reported, so replicas agree, and a restarted hub hands
// out what it handed out before.

// importsState is the registry's record of the imports. Guarded by
// Registry.mu.
type importsState struct {
	pools clustersetip.Pools
	// ipImports are the ClusterSetIP imports, which need IPs; claims are
	// filled in when assigning.
	ipImports map[string]clustersetip.Import
	// all holds the keys of every import, headless ones included.
	all      map[string]struct{}
	assigned map[string]clustersetip.Result
	// collisions are the latest assignment's, for operators.
	collisions []clustersetip.Collision
	// importers are the clusters whose spokes write imports, not
	// withdrawn, as of the last resolve.
	importers []federation.ClusterID
	// ready is decideLocked's buffer: a decision that stands is compared,
	// not kept, and allocates nothing.
	ready []federation.ClusterID
}

// maxHeld bounds the imports one cluster may report holding.
const maxHeld = 100_000

// SetImporter records that the stream's spoke writes the clusterset's
// imports into its cluster: its reports of what it holds count towards
// exports being Ready.
func (c *Conn) SetImporter() {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	s, err := c.owned()
	if err != nil || s.importer {
		return
	}
	s.importer = true
	c.r.publishLocked(changeSet{cluster: c.id})
}

// ApplyHeld applies a complete report of the imports the cluster holds
// (all chunks merged). A report that is invalid is rejected whole; the
// last good one stays.
func (c *Conn) ApplyHeld(h *federationpb.ImportsHeld) error {
	if err := validateHeld(h); err != nil {
		return fmt.Errorf("cluster %q: imports held: %w", c.id, err)
	}
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := c.owned()
	if err != nil {
		return err
	}
	ch := changeSet{cluster: c.id, held: map[string]struct{}{}}
	if h.GetFull() {
		next := make(map[string]*federationpb.HeldImport, len(h.GetImports()))
		for _, im := range h.GetImports() {
			next[federation.ServiceKey(im.GetNamespace(), im.GetName())] = im
		}
		for k, old := range s.held {
			if im, ok := next[k]; !ok || !old.EqualVT(im) {
				ch.held[k] = struct{}{}
			}
		}
		for k := range next {
			if _, ok := s.held[k]; !ok {
				ch.held[k] = struct{}{}
			}
		}
		s.held = next
	} else {
		if s.held == nil {
			s.held = map[string]*federationpb.HeldImport{}
		}
		for _, k := range h.GetRemoved() {
			if _, ok := s.held[k]; ok {
				delete(s.held, k)
				ch.held[k] = struct{}{}
			}
		}
		for _, im := range h.GetImports() {
			k := federation.ServiceKey(im.GetNamespace(), im.GetName())
			if !s.held[k].EqualVT(im) {
				s.held[k] = im
				ch.held[k] = struct{}{}
			}
		}
		if len(s.held) > maxHeld {
			return fmt.Errorf("cluster %q: imports held: %d imports is more than %d: %w", c.id, len(s.held), maxHeld, federation.ErrOverLimit)
		}
	}
	if len(ch.held) > 0 {
		r.publishLocked(ch)
	}
	return nil
}

// validateHeld checks a report of imports held.
func validateHeld(h *federationpb.ImportsHeld) error {
	if n := len(h.GetImports()) + len(h.GetRemoved()); n > maxHeld {
		return fmt.Errorf("%d entries is more than %d: %w", n, maxHeld, federation.ErrOverLimit)
	}
	for i, im := range h.GetImports() {
		key := federation.ServiceKey(im.GetNamespace(), im.GetName())
		field := fmt.Sprintf("imports[%d]", i)
		if err := federation.ValidateServiceName(im.GetNamespace(), im.GetName()); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if im.GetNoNamespace() && (len(im.GetIps()) > 0 || len(im.GetClusters()) > 0) {
			return fmt.Errorf("import %s: %s: holds IPs or clusters in a namespace it says does not exist: %w", key, field, federation.ErrInvalid)
		}
		if len(im.GetIps()) > 2 {
			return fmt.Errorf("import %s: %s.ips: %d addresses is more than 2: %w", key, field, len(im.GetIps()), federation.ErrInvalid)
		}
		for j, ip := range im.GetIps() {
			if _, err := netip.ParseAddr(ip); err != nil {
				return fmt.Errorf("import %s: %s.ips[%d]: %q is not an IP address: %w", key, field, j, ip, federation.ErrInvalid)
			}
		}
		if len(im.GetClusters()) > federation.MaxClusters {
			return fmt.Errorf("import %s: %s.clusters: %d clusters is more than %d: %w", key, field, len(im.GetClusters()), federation.MaxClusters, federation.ErrInvalid)
		}
	}
	return nil
}

// resolveImportsLocked decides the ClusterSetIPs and Ready exports of the
// imports among next's changed services, and of those whose inputs
// changed otherwise (held: keys of imports whose holdings a cluster
// reported changed), into next's imports, and adds the services whose
// decisions changed to next's changes. Callers hold r.mu.
//
// It runs on every publish, so the common case (endpoints of services
// changed, nothing else) allocates nothing when the decisions stand.
func (r *Registry) resolveImportsLocked(next *snapshot, held map[string]struct{}) {
	st := &r.imports
	changed := next.changes.Services
	reassign := false
	for _, key := range changed {
		v, ok := next.services.get(key)
		if ok && v.IsImport() {
			st.all[key] = struct{}{}
		} else {
			delete(st.all, key)
		}
		want, needs := ipImport(v, ok)
		have, had := st.ipImports[key]
		switch {
		case needs && (!had || !have.Since.Equal(want.Since) || !slices.Equal(have.Families, want.Families)):
			st.ipImports[key] = want
			reassign = true
		case !needs && had:
			delete(st.ipImports, key)
			reassign = true
		}
	}
	importersChanged := r.importersChangedLocked()
	if importersChanged {
		st.importers = r.importersLocked()
	}
	// A claim counts while its cluster is a member: a withdrawn
	// cluster's no longer does.
	reassign = reassign || len(held) > 0 || importersChanged

	d := decisions{next: next}
	for _, key := range changed {
		// The service's change is in next's already.
		d.set(key, r.decideLocked(next, key), false)
	}
	if !reassign {
		d.done()
		return
	}

	// Other imports whose decisions may have changed.
	touched := map[string]struct{}{}
	results, collisions := clustersetip.Assign(st.pools, r.claimedLocked())
	for key, res := range results {
		if old, ok := st.assigned[key]; !ok || !sameResult(old, res) {
			touched[key] = struct{}{}
		}
	}
	st.assigned = results
	st.collisions = collisions
	for k := range held {
		touched[k] = struct{}{}
	}
	if importersChanged {
		for k := range st.all {
			touched[k] = struct{}{}
		}
	}
	for key := range touched {
		d.set(key, r.decideLocked(next, key), true)
	}
	d.done()
}

// decideLocked returns the decisions on the import key in next: zero for a
// service that is none. Callers hold r.mu.
func (r *Registry) decideLocked(next *snapshot, key string) clusterset.Import {
	v, ok := next.services.get(key)
	if !ok || !v.IsImport() {
		return clusterset.Import{}
	}
	ips, ipErr := r.imports.result(key)
	r.imports.ready = r.readyLocked(v, r.imports.importers, r.imports.ready[:0])
	return clusterset.Import{ClustersetIPs: ips, IPError: ipErr, Ready: r.imports.ready}
}

// decisions edits a snapshot's imports, copying them on the first change.
type decisions struct {
	next *snapshot
	edit *cowEdit[clusterset.Import]
	// added are the services whose decisions changed that next's changes
	// did not name.
	added []string
}

// set records the decisions on import key, and when they differ from
// those next holds and report is set, the service as changed. Each key is
// reported once. imp.Ready may be decideLocked's buffer: what is kept is
// a copy.
func (d *decisions) set(key string, imp clusterset.Import, report bool) {
	old, _ := d.next.imports.get(key)
	if old.Equal(imp) {
		return
	}
	imp.Ready = slices.Clip(slices.Clone(imp.Ready))
	if len(imp.Ready) == 0 {
		imp.Ready = nil
	}
	if d.edit == nil {
		d.edit = newCowEdit(&d.next.imports)
	}
	if imp.IsZero() {
		d.edit.delete(key)
	} else {
		d.edit.set(key, imp)
	}
	if !report {
		return
	}
	if _, named := slices.BinarySearch(d.next.changes.Services, key); !named {
		d.added = append(d.added, key)
	}
}

func (d *decisions) done() {
	if d.edit != nil {
		d.next.imports = d.edit.done()
	}
	if len(d.added) > 0 {
		d.next.changes.Services = append(d.next.changes.Services, d.added...)
		slices.Sort(d.next.changes.Services)
	}
}

// result returns an import's assigned ClusterSetIPs and why one is
// missing.
func (st *importsState) result(key string) ([]netip.Addr, string) {
	res, ok := st.assigned[key]
	if !ok {
		return nil, ""
	}
	return res.IPs, res.Err
}

// ipImport returns the assignment input of a ClusterSetIP import, and
// false for any other service.
func ipImport(v *clusterset.ServiceView, ok bool) (clustersetip.Import, bool) {
	if !ok || !v.IsImport() || v.Headless() {
		return clustersetip.Import{}, false
	}
	return clustersetip.Import{
		Key:      v.Key,
		Since:    v.Oldest.GetExport().GetTime().AsTime(),
		Families: v.ImportFamilies(),
	}, true
}

func sameResult(a, b clustersetip.Result) bool {
	return a.Err == b.Err && slices.Equal(a.IPs, b.IPs)
}

// importersChangedLocked reports whether the importers differ from
// those of the last resolve, without allocating.
func (r *Registry) importersChangedLocked() bool {
	n := 0
	for id, s := range r.shards {
		if s.importer && s.status.State != clusterset.Withdrawn {
			if _, found := slices.BinarySearch(r.imports.importers, id); !found {
				return true
			}
			n++
		}
	}
	return n != len(r.imports.importers)
}

// importersLocked returns the clusters whose spokes write imports and
// that are members (not withdrawn), sorted.
func (r *Registry) importersLocked() []federation.ClusterID {
	var out []federation.ClusterID
	for id, s := range r.shards {
		if s.importer && s.status.State != clusterset.Withdrawn {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// claimedLocked returns the ClusterSetIP imports with the IPs the member
// clusters hold for each.
func (r *Registry) claimedLocked() []clustersetip.Import {
	claims := map[string][]clustersetip.Claim{}
	for _, s := range r.shards {
		if s.status.State == clusterset.Withdrawn {
			continue
		}
		for key, h := range s.held {
			if _, ok := r.imports.ipImports[key]; !ok {
				continue
			}
			for _, ip := range h.GetIps() {
				a, err := netip.ParseAddr(ip)
				if err != nil {
					continue // validated on arrival
				}
				cs := claims[key]
				if i := slices.IndexFunc(cs, func(c clustersetip.Claim) bool { return c.Addr == a }); i >= 0 {
					cs[i].Holders++
				} else {
					claims[key] = append(cs, clustersetip.Claim{Addr: a, Holders: 1})
				}
			}
		}
	}
	out := make([]clustersetip.Import, 0, len(r.imports.ipImports))
	for key, im := range r.imports.ipImports {
		im.Claims = claims[key]
		out = append(out, im)
	}
	return out
}

// readyLocked appends to ready the exporting clusters of v whose export
// every importer holds: its ServiceImport lists the cluster, or the
// importer has no namespace of the import (and so holds none, by design).
func (r *Registry) readyLocked(v *clusterset.ServiceView, importers []federation.ClusterID, ready []federation.ClusterID) []federation.ClusterID {
	if len(importers) == 0 {
		return ready
	}
	for _, c := range v.Clusters {
		all := true
		for _, id := range importers {
			h, ok := r.shards[id].held[v.Key]
			if !ok || (!h.GetNoNamespace() && !slices.Contains(h.GetClusters(), string(c.Cluster))) {
				all = false
				break
			}
		}
		if all {
			ready = append(ready, c.Cluster)
		}
	}
	return ready
}

// ClustersetIPCollisions returns the collisions of the latest
// ClusterSetIP assignment: imports whose clusters held an IP that an
// older import holds, and that got another.
func (r *Registry) ClustersetIPCollisions() []clustersetip.Collision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.imports.collisions)
}
