package xds

import "github.com/meshfed/meshfed/xds/resources"

// sharesNames reports whether the sets of a type hold the same names: EDS
// has a set per locality view, each with an assignment of every service.
// Addresses have a set per network, each of its own workloads, and the
// other types one set each.
func sharesNames(typeURL string) bool { return typeURL == resources.EndpointType }

// nameTable numbers the names of a type whose sets share them. Each set
// then holds its entries in a slice by number, not in a map of its own:
// at a thousand EDS views of ten thousand names, a view costs a pointer per
// name (80 KB) instead of a map (600 KB), and applying a change to every
// view looks its name up in this one table, which the CPU's cache keeps
// warm, rather than in a thousand maps that miss it.
type nameTable struct {
	number map[string]int32
	// holders counts the sets holding each number; a number none holds
	// is reused, so that names that come and go do not grow every set.
	holders []int32
	free    []int32
}

func newNameTable() *nameTable { return &nameTable{number: map[string]int32{}} }

// hold returns name's number, numbering it if it has none, and counts
// one more set holding it.
func (t *nameTable) hold(name string) int32 {
	i, ok := t.number[name]
	if !ok {
		if n := len(t.free); n > 0 {
			i, t.free = t.free[n-1], t.free[:n-1]
		} else {
			i = int32(len(t.holders))
			t.holders = append(t.holders, 0)
		}
		t.number[name] = i
	}
	t.holders[i]++
	return i
}

// release counts one set fewer holding name, number i, and frees the
// number when none does.
func (t *nameTable) release(name string, i int32) {
	if t.holders[i]--; t.holders[i] > 0 {
		return
	}
	delete(t.number, name)
	t.free = append(t.free, i)
}

// entries is one set's resources: by number in a table shared with the
// type's other sets, or in a map of the set's own. Every method runs under
// the cache's lock, as the table is shared.
type entries struct {
	table *nameTable
	slot  []*entry // by number, with a table
	count int      // the slots in use
	own   map[string]*entry
}

func newEntries(table *nameTable) entries {
	if table != nil {
		return entries{table: table}
	}
	return entries{own: map[string]*entry{}}
}

func (es *entries) len() int {
	if es.table == nil {
		return len(es.own)
	}
	return es.count
}

// get returns the entry named name, if the set has one.
func (es *entries) get(name string) (*entry, bool) {
	if es.table == nil {
		e, ok := es.own[name]
		return e, ok
	}
	i, ok := es.table.number[name]
	if !ok || int(i) >= len(es.slot) || es.slot[i] == nil {
		return nil, false
	}
	return es.slot[i], true
}

// put adds e, or replaces the entry of its name.
func (es *entries) put(e *entry) {
	if es.table == nil {
		es.own[e.Name] = e
		return
	}
	if i, ok := es.table.number[e.Name]; ok && int(i) < len(es.slot) && es.slot[i] != nil {
		es.slot[i] = e
		return
	}
	i := es.table.hold(e.Name)
	if int(i) >= len(es.slot) {
		// Grow to the table's size at once: the set's other names are
		// numbered already, and will follow.
		es.slot = append(es.slot, make([]*entry, len(es.table.holders)-len(es.slot))...)
	}
	es.slot[i] = e
	es.count++
}

// remove drops the entry named name, if the set has one.
func (es *entries) remove(name string) {
	if es.table == nil {
		delete(es.own, name)
		return
	}
	i, ok := es.table.number[name]
	if !ok || int(i) >= len(es.slot) || es.slot[i] == nil {
		return
	}
	es.slot[i] = nil
	es.count--
	es.table.release(name, i)
}

// all calls yield for each entry, in no particular order.
func (es *entries) all(yield func(*entry) bool) {
	if es.table == nil {
		for _, e := range es.own {
			if !yield(e) {
				return
			}
		}
		return
	}
	for _, e := range es.slot {
		if e != nil && !yield(e) {
			return
		}
	}
}

// release gives back the numbers of a set that is dropped, so that its
// names stop counting it; a set with a map of its own has nothing to give.
func (es *entries) release() {
	if es.table == nil {
		return
	}
	for i, e := range es.slot {
		if e != nil {
			es.table.release(e.Name, int32(i))
		}
	}
	es.slot, es.count = nil, 0
}
