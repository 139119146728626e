package xds

import (
	"slices"
	"strings"
	"time"
	"weak"

	"github.com/meshfed/meshfed/xds/translate"
)

// entry is one resource, encoded once; several sets may share it.
type entry = translate.Resource

// set is the resources of one type for one view ("" for resources every
// proxy shares).
type set struct {
	// version is the state-of-the-world version of the whole set: sum in
	// hex, so that every hub replica names equal sets alike and a proxy
	// moving between replicas never takes a different set for the one it
	// has (or an equal one for a change).
	version string
	// sum is the XOR of a hash of each entry's name and version, kept
	// as entries change.
	sum     uint64
	entries entries
	// rev counts the set's changes, and recent holds the names the latest
	// ones changed (oldest first), so that a wildcard delta client in sync
	// at an earlier revision is compared on those names only.
	rev    uint64
	recent []setChange
	// sorted is entries by name, built when a full comparison needs it
	// and dropped on change: every ztunnel that connects to a set of one
	// revision gets the same first response (100,000 addresses sorted once,
	// not once per ztunnel).
	sorted []*entry
	// full is the encoded first response of a wildcard delta client at
	// revision fullRev: built once per revision, whatever the number of
	// ztunnels that connect, and held weakly: its megabytes stay only
	// while streams still send it.
	full    weak.Pointer[encodedResponse]
	fullRev uint64

	// What a wildcard delta client synced at a revision lacks is what
	// changed after it: revs is the revision each entry last changed at,
	// and removed the revision each name left the set at, for the latest
	// removals (tombstones, in order). A client synced before floor
	// cannot be compared: removals it missed were forgotten. The set
	// holds this once, so that a client costs its stream a revision, not
	// a copy of the versions of everything it holds.
	revs       map[string]uint64
	removed    map[string]uint64
	tombstones []tombstone
	floor      uint64
}

// tombstone is a name removed from a set at a revision.
type tombstone struct {
	name string
	rev  uint64
}

// minTombstones is the fewest removals a set remembers; it remembers as
// many as it has entries beyond that.
const minTombstones = 1024

func newSet(table *nameTable) *set { return &set{entries: newEntries(table)} }

// track starts keeping revisions and removals, for the set's first
// wildcard delta client: sets that only clients by name read (EDS, one
// per locality) keep none. What came before counts as changed now, and
// no client synced earlier exists.
func (s *set) track() {
	if s.revs != nil {
		return
	}
	s.revs, s.removed, s.floor = make(map[string]uint64, s.entries.len()), map[string]uint64{}, s.rev
	for e := range s.entries.all {
		s.revs[e.Name] = s.rev
	}
}

// put records an entry changed (or added) by the revision being made.
func (s *set) put(e *entry) {
	s.entries.put(e)
	if s.revs != nil {
		s.revs[e.Name] = s.rev + 1
		delete(s.removed, e.Name)
	}
}

// remove records a name removed by the revision being made, and forgets
// the oldest removals beyond what the set remembers.
func (s *set) remove(name string) {
	s.entries.remove(name)
	if s.revs == nil {
		return
	}
	delete(s.revs, name)
	s.removed[name] = s.rev + 1
	s.tombstones = append(s.tombstones, tombstone{name, s.rev + 1})
	for len(s.tombstones) > max(minTombstones, s.entries.len()) {
		t := s.tombstones[0]
		s.tombstones[0] = tombstone{}
		s.tombstones = s.tombstones[1:]
		if s.removed[t.name] == t.rev {
			delete(s.removed, t.name)
		}
		s.floor = t.rev
	}
}

// setChange is the names one revision of a set changed, the set's version
// after it, and when a spoke observed the change it carries (zero: not a
// spoke's change), so that a proxy's ACK of a version can be timed.
type setChange struct {
	rev   uint64
	names []string
	// every marks the revision that made the set: it changed every name
	// the set then held, which are not listed (a view's first build holds
	// ten thousand names, and a thousand views would keep them all until
	// their logs move on).
	every    bool
	version  string
	observed time.Time
}

// touches reports whether the change may concern a proxy, given whether a
// list of names does.
func (c setChange) touches(names func([]string) bool) bool { return c.every || names(c.names) }

// maxRecent bounds a set's change log; a client further behind is
// compared in full.
const maxRecent = 64

// changed records a revision that changed names, or every name (the
// set's first, whose names are not listed), and gave the set version,
// carrying a change observed at observed.
func (s *set) changed(names []string, every bool, version string, observed time.Time) {
	s.rev++
	s.sorted, s.full = nil, weak.Pointer[encodedResponse]{}
	s.version = version
	if len(s.recent) == maxRecent {
		// Forget the oldest by sliding the log along its array, which
		// append moves once the log reaches the array's end: one copy
		// per maxRecent changes, not one per change (a push changes one
		// set per view: with a thousand views, a copy of the whole log
		// each was 9% of the hub's CPU).
		s.recent[0] = setChange{}
		s.recent = s.recent[1:]
	}
	s.recent = append(s.recent, setChange{rev: s.rev, names: names, every: every, version: version, observed: observed})
}

// acked returns the revision of the set that a proxy holding version has
// (the newest with that version), and the observed times of the changes
// it got since revision from that touch it (touches, given a revision's
// changed names). ok is false when the version is not among the set's
// recent revisions.
func (s *set) acked(from uint64, version string, touches func(names []string) bool) (rev uint64, observed []time.Time, ok bool) {
	i := len(s.recent) - 1
	for ; i >= 0 && s.recent[i].version != version; i-- {
	}
	if i < 0 {
		return 0, nil, false
	}
	rev = s.recent[i].rev
	for _, c := range s.recent[:i+1] {
		if c.rev > from && !c.observed.IsZero() && c.touches(touches) {
			observed = append(observed, c.observed)
		}
	}
	return rev, observed, true
}

// byName returns the set's entries sorted by name.
func (s *set) byName() []*entry {
	if s.sorted == nil {
		s.sorted = slices.SortedFunc(s.entries.all, compareNames)
	}
	return s.sorted
}

func compareNames(a, b *entry) int { return strings.Compare(a.Name, b.Name) }

// changedSince returns the names changed after revision rev, without
// duplicates, and whether the log reaches back that far.
func (s *set) changedSince(rev uint64) ([]string, bool) {
	if len(s.recent) == 0 || s.recent[0].rev > rev+1 {
		return nil, false
	}
	if last := s.recent[len(s.recent)-1]; last.rev == rev+1 && !last.every {
		return last.names, true // one revision: its names have no duplicates
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range s.recent {
		if c.rev <= rev {
			continue
		}
		if c.every {
			return nil, false
		}
		for _, n := range c.names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out, true
}
