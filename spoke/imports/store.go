package imports

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
)

// Set is the imports the cluster should hold, by key ("namespace/name"),
// as one hub replica sent them. A published Set is never modified.
type Set struct {
	// Hub is the replica the set came from.
	Hub string
	// Network is the cluster's network as the hub knows it: an endpoint
	// of another network is that network's gateway.
	Network string
	// Imports are whole: every part the replica sent of one import joined.
	Imports map[string]*federationpb.Import
	// Clusters are the members' clusters, as the last set that carried
	// them said (sent only to a spoke that serves remote views; nil from
	// a hub that predates them).
	Clusters []*federationpb.Cluster
}

// Import returns one import.
func (s *Set) Import(key string) (*federationpb.Import, bool) {
	if s == nil {
		return nil, false
	}
	im, ok := s.Imports[key]
	return im, ok
}

// Changed calls fn with the key of each import that differs between prev
// and s, a later set: added, replaced or removed. A set's imports are
// replaced, never modified, so a changed import is another pointer. With
// no prev, every import of s is changed.
func (s *Set) Changed(prev *Set, fn func(key string)) {
	var before map[string]*federationpb.Import
	if prev != nil {
		before = prev.Imports
	}
	var after map[string]*federationpb.Import
	if s != nil {
		after = s.Imports
	}
	for k, im := range after {
		if before[k] != im {
			fn(k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			fn(k)
		}
	}
}

// Store holds every hub link's imports and what the cluster holds. It is
// safe for concurrent use.
type Store struct {
	held *Held

	mu    sync.Mutex
	links map[*Link]struct{}
	cur   *Set
	// changed is closed when cur changes.
	changed chan struct{}
}

// NewStore returns a store with no links and no set.
func NewStore() *Store {
	return &Store{held: newHeld(), links: map[*Link]struct{}{}, changed: make(chan struct{})}
}

// Held is where the writer says what the cluster holds.
func (s *Store) Held() *Held { return s.held }

// Current returns the set the writer should make the cluster hold (nil
// until a replica has sent a complete one) and a channel closed when it
// next changes.
func (s *Store) Current() (*Set, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.changed
}

// Link returns the link of the hub replica at hub. Close it when the
// replica goes.
func (s *Store) Link(hub string) *Link {
	l := &Link{store: s, hub: hub, held: s.held.subscribe()}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.links[l] = struct{}{}
	return l
}

// choose publishes the preferred link's set when it differs from the
// current one. Callers hold s.mu.
func (s *Store) chooseLocked() {
	var best *Link
	for l := range s.links {
		if l.complete && (best == nil || cmp.Less(l.hub, best.hub)) {
			best = l
		}
	}
	if best == nil || best.published == s.cur {
		return // no replica streams a set: keep the last
	}
	s.cur = best.published
	close(s.changed)
	s.changed = make(chan struct{})
}

// Link is one hub replica's stream of imports: a syncproto.ImportsLink.
type Link struct {
	store *Store
	hub   string
	held  *heldCursor

	// Guarded by store.mu.
	imports  map[string]*federationpb.Import
	clusters []*federationpb.Cluster
	// complete: a full set arrived on the current stream.
	complete bool
	// published is the Set of imports as last received (shared with
	// readers; replaced, never modified).
	published *Set
}

var _ syncproto.ImportsLink = (*Link)(nil)

// Start begins a stream: the link offers no set until the replica's first
// full one, and reports the cluster's holdings in full.
func (l *Link) Start() {
	l.store.mu.Lock()
	l.complete = false
	l.store.chooseLocked()
	l.store.mu.Unlock()
	l.held.restart()
}

// Stop ends the stream: the link offers no set until its next one.
func (l *Link) Stop() {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	l.complete = false
	l.store.chooseLocked()
}

// Close removes the link: its replica is gone.
func (l *Link) Close() {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	delete(l.store.links, l)
	l.store.held.unsubscribe(l.held)
	l.store.chooseLocked()
}

// Received takes a complete set from the replica.
func (l *Link) Received(im *federationpb.Imports) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if im.GetFull() {
		l.imports = make(map[string]*federationpb.Import, len(im.GetImports()))
		l.complete = true
	} else {
		if !l.complete {
			return // a delta without its base: the replica sends full first on every stream
		}
		l.imports = maps.Clone(l.imports)
		for _, k := range im.GetRemoved() {
			delete(l.imports, k)
		}
	}
	// Parts of one import in this set add up (the endpoints of one
	// cluster may be cut across parts too); a part replaces what an
	// earlier set said of the import.
	seen := map[string]bool{}
	for _, part := range im.GetImports() {
		k := federation.ServiceKey(part.GetNamespace(), part.GetName())
		if !seen[k] {
			seen[k] = true
			l.imports[k] = part
			continue
		}
		whole := l.imports[k]
		for _, src := range part.GetSources() {
			i := slices.IndexFunc(whole.Sources, func(s *federationpb.ImportSource) bool { return s.GetCluster() == src.GetCluster() })
			if i < 0 {
				whole.Sources = append(whole.Sources, src)
				continue
			}
			w := whole.Sources[i]
			w.Endpoints = append(w.Endpoints, src.GetEndpoints()...)
			w.ClusterEndpoints = append(w.ClusterEndpoints, src.GetClusterEndpoints()...)
			w.Workloads = append(w.Workloads, src.GetWorkloads()...)
			w.ViaGateway = w.ViaGateway || src.GetViaGateway()
		}
	}
	if im.GetFull() || len(im.GetClusters()) > 0 {
		l.clusters = im.GetClusters()
	}
	l.published = &Set{Hub: l.hub, Network: im.GetNetwork(), Imports: l.imports, Clusters: l.clusters}
	l.store.chooseLocked()
}

// NextHeld returns the next report of what the cluster holds.
func (l *Link) NextHeld(maxBytes int) []*federationpb.ImportsHeld { return l.held.next(maxBytes) }

// HeldChanged has a value when NextHeld may have a report.
func (l *Link) HeldChanged() <-chan struct{} { return l.held.changed }
