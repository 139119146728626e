package xds

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/meshfed/meshfed/xds/translate"
)

type setKey struct {
	typeURL string
	view    string
}

// sotwWatch is a state-of-the-world stream's open request for one type.
type sotwWatch struct {
	typeURL string
	// first is set for the type's first request on its stream, which is
	// answered even when the proxy would get nothing.
	first bool
	sub   *sotwSubscription
	ch    chan<- *response
}

// deltaWatch is a delta stream's open request for one type.
type deltaWatch struct {
	typeURL string
	// first is set for the type's first request on its stream, which a
	// wildcard subscription gets an answer to even when it has everything.
	first bool
	sub   *subscription
	ch    chan<- *deltaResp
}

// Cache holds encoded resources and the proxies' open watches: the
// server's stream handlers watch it through watchSotw and watchDelta.
type Cache struct {
	mu    sync.Mutex
	sets  map[setKey]*set
	names map[string]*nameTable // by type URL, of the types whose sets share names
	sotw  map[setKey]*watchers[*sotwWatch]
	delta map[setKey]*watchers[*deltaWatch]
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{
		sets:  map[setKey]*set{},
		names: map[string]*nameTable{},
		sotw:  map[setKey]*watchers[*sotwWatch]{},
		delta: map[setKey]*watchers[*deltaWatch]{},
	}
}

// Apply puts encoded resources in a set (sharing them with any other set
// that has them), drops removals, and answers the watches of the set that
// now differ; or it forgets a dropped view's set. It reports whether the
// set changed.
func (c *Cache) Apply(u translate.SetUpdate) bool { return c.ApplyObserved(u, time.Time{}) }

// ApplyObserved is Apply for an update that carries a change a spoke
// observed at observed (in the hub's clock): the proxies' ACKs of it are
// timed from then.
func (c *Cache) ApplyObserved(u translate.SetUpdate, observed time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := setKey{u.TypeURL, u.View}
	if u.Drop {
		s, ok := c.sets[k]
		if ok {
			s.entries.release()
		}
		delete(c.sets, k)
		// A view is dropped once no proxy uses it: its watch indexes are
		// empty, and would otherwise stay for every view ever used.
		if ws := c.sotw[k]; ws != nil && ws.empty() {
			delete(c.sotw, k)
		}
		if ws := c.delta[k]; ws != nil && ws.empty() {
			delete(c.delta, k)
		}
		return ok
	}
	upserts, removals := u.Upserts, u.Removals
	s := c.sets[k]
	created := s == nil
	if created {
		var table *nameTable
		if sharesNames(u.TypeURL) {
			if table = c.names[u.TypeURL]; table == nil {
				table = newNameTable()
				c.names[u.TypeURL] = table
			}
		}
		s = newSet(table)
		c.sets[k] = s
	}
	// A new set's first revision changes every name it holds, which the
	// log does not list (see setChange.every) and the watches need not
	// be told one by one: they are all answered.
	var changed []string
	for _, e := range upserts {
		old, ok := s.entries.get(e.Name)
		if ok && old.Version == e.Version {
			continue
		}
		if ok {
			s.sum ^= old.Sum
		}
		s.sum ^= e.Sum
		s.put(e)
		if !created {
			changed = append(changed, e.Name)
		}
	}
	for _, name := range removals {
		if old, ok := s.entries.get(name); ok {
			s.sum ^= old.Sum
			s.remove(name)
			changed = append(changed, name)
		}
	}
	if len(changed) == 0 && !created {
		return false
	}
	s.changed(changed, created, strconv.FormatUint(s.sum, 16), observed)
	// A new set answers every watch that waited for it to be built.
	c.notifyLocked(k, s, changed, created)
	return true
}

// Acked returns the revision of the set of typeURL and view that a proxy
// holding version has, and the observed times of the changes it got since
// revision from that touch it; ok is false when the version is unknown
// (older than the set's recent revisions, or of no revision).
func (c *Cache) Acked(typeURL, view string, from uint64, version string, touches func(names []string) bool) (rev uint64, observed []time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[setKey{typeURL, view}]
	if s == nil {
		return 0, nil, false
	}
	return s.acked(from, version, touches)
}

// Behind returns, for a proxy that holds revision rev of a set, whether a
// later revision changed what it watches (touches), and when the oldest
// such change was observed (zero when not a spoke's).
func (c *Cache) Behind(typeURL, view string, rev uint64, touches func(names []string) bool) (behind bool, since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[setKey{typeURL, view}]
	if s == nil || s.rev <= rev {
		return false, time.Time{}
	}
	for _, ch := range s.recent {
		if ch.rev > rev && ch.touches(touches) {
			return true, ch.observed
		}
	}
	// Changes older than the log: behind, since an unknown time.
	return len(s.recent) == 0 || s.recent[0].rev > rev+1, time.Time{}
}

// SetStatus describes one set of the cache.
type SetStatus struct {
	Type      string `json:"type"`
	View      string `json:"view,omitempty"`
	Version   string `json:"version"`
	Resources int    `json:"resources"`
}

// Sets describes every set, sorted by type and view.
func (c *Cache) Sets() []SetStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SetStatus, 0, len(c.sets))
	for k, s := range c.sets {
		out = append(out, SetStatus{Type: k.typeURL, View: k.view, Version: s.version, Resources: s.entries.len()})
	}
	slices.SortFunc(out, func(a, b SetStatus) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.View, b.View)) })
	return out
}

// Resources returns the versions of a set's resources by name; nil when
// there is no such set.
func (c *Cache) Resources(typeURL, view string) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[setKey{typeURL, view}]
	if s == nil {
		return nil
	}
	out := make(map[string]string, s.entries.len())
	for e := range s.entries.all {
		out[e.Name] = e.Version
	}
	return out
}

func (c *Cache) notifyLocked(k setKey, s *set, changed []string, all bool) {
	if ws := c.sotw[k]; ws != nil {
		for _, w := range ws.affected(changed, all) {
			if resp := sotwResponse(w, s, false); resp != nil {
				ws.remove(w)
				w.ch <- resp // never blocks: one response per watch, buffered per type
			}
		}
	}
	if ws := c.delta[k]; ws != nil {
		for _, w := range ws.affected(changed, all) {
			if resp := deltaResponse(w, s, false); resp != nil {
				ws.remove(w)
				w.ch <- resp // never blocks: one response per watch, buffered per type
			}
		}
	}
}

// watchSotw answers a state-of-the-world request for the set view of its
// type at once when the proxy lacks something (or for the type's first
// request), or parks the watch until the set changes. It returns the
// watch's cancel function.
func (c *Cache) watchSotw(view string, w *sotwWatch) func() {
	k := setKey{w.typeURL, view}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sets[k]; s != nil {
		if resp := sotwResponse(w, s, w.first); resp != nil {
			w.ch <- resp
			return func() {}
		}
	}
	return park(c, c.sotw, k, w, w.sub.wildcard, w.sub.names)
}

// watchDelta answers a delta request for the set view of its type at once
// when the proxy lacks something, or parks the watch until the set
// changes. It returns the watch's cancel function.
func (c *Cache) watchDelta(view string, w *deltaWatch) func() {
	k := setKey{w.typeURL, view}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A wildcard client is answered at once, even with nothing, once its
	// set exists. Until then (a view being built) it waits: an empty answer
	// would tell a reconnecting client that everything it has is gone.
	if s := c.sets[k]; s != nil {
		if resp := s.deltaAnswer(w); resp != nil {
			w.ch <- resp
			return func() {}
		}
	}
	return park(c, c.delta, k, w, w.sub.wildcard, w.sub.names)
}

// park registers a watch that waits for a change and returns its cancel
// function. Callers hold c.mu.
func park[W comparable](c *Cache, index map[setKey]*watchers[W], k setKey, w W, wildcard bool, names map[string]struct{}) func() {
	ws := index[k]
	if ws == nil {
		ws = newWatchers[W]()
		index[k] = ws
	}
	ws.add(w, wildcard, names)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		ws.remove(w)
	}
}
