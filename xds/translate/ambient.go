package translate

import (
	"maps"
	"slices"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/xds/workloads"
)

// ambientTranslator produces the workload API's addresses, per network.
type ambientTranslator struct {
	// active is set once a proxy has asked for addresses; until then
	// nothing is built.
	active  bool
	builder *workloads.Builder
	items   map[string]addrItem // the current resources, by name
}

// addrItem is a workload API resource: its name and scope (the item's
// Message dropped once encoded), and its encoding; nil when it was removed.
type addrItem struct {
	item workloads.Item
	res  *Resource
}

// change is an item that changed, and its previous scope (when had): a
// network that saw it before and does not now gets its removal.
type change struct {
	addrItem
	was workloads.Item
	had bool
}

func newAmbientTranslator(trustDomain string) ambientTranslator {
	return ambientTranslator{builder: workloads.NewBuilder(trustDomain), items: map[string]addrItem{}}
}

// translate regenerates the addresses a change touches (every one when
// all is set), encodes each once and hands it to the networks that see it.
func (a *ambientTranslator) translate(in *input, views []View, all bool) {
	items := a.builder.Push(in.snap, slices.Sorted(maps.Keys(in.services)), in.workloads, all)
	var changed []change
	for _, it := range items {
		old, had := a.items[it.Name]
		c := change{was: old.item, had: had}
		if it.Message == nil {
			if had {
				delete(a.items, it.Name)
				c.item = it
				changed = append(changed, c)
			}
			continue
		}
		ai, ok := a.encode(in, it)
		if !ok {
			continue
		}
		if had && old.res.Version == ai.res.Version && sameScope(old.item, it) {
			continue
		}
		a.items[it.Name] = ai
		c.addrItem = ai
		changed = append(changed, c)
	}
	if len(changed) == 0 {
		return
	}
	for _, v := range views {
		if v.TypeURL != AddressType {
			continue
		}
		u := SetUpdate{TypeURL: AddressType, View: v.Key}
		for _, c := range changed {
			switch {
			case c.res != nil && c.item.InScope(v.For.Network):
				u.Upserts = append(u.Upserts, c.res)
			case c.had && c.was.InScope(v.For.Network):
				u.Removals = append(u.Removals, c.item.Name)
			}
		}
		if !u.empty() {
			in.emit(u)
		}
	}
}

// build returns the whole address set of a new view, in no particular
// order: a network's set is every address it sees (100,000 and more), and
// the cache keeps it by name anyway.
func (a *ambientTranslator) build(v View) SetUpdate {
	u := SetUpdate{TypeURL: AddressType, View: v.Key}
	for _, ai := range a.items {
		if ai.item.InScope(v.For.Network) {
			u.Upserts = append(u.Upserts, ai.res)
		}
	}
	return u
}

// encode encodes an item at once, whether or not a ztunnel of its
// network is connected, and keeps only the encoding: it is a third of the message's size, and a
// hub holds one per workload.
func (a *ambientTranslator) encode(in *input, it workloads.Item) (addrItem, bool) {
	res, err := in.encode(AddressType, it.Name, it.Message)
	if err != nil {
		return addrItem{}, false
	}
	it.Message = nil
	return addrItem{item: it, res: res}, true
}

func sameScope(a, b workloads.Item) bool {
	eq := func(x, y *federation.NetworkID) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.Only, b.Only) && eq(a.Except, b.Except)
}
