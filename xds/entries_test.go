package xds

import (
	"slices"
	"testing"
	"time"

	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/translate"
)

func heldNames(es *entries) []string {
	var out []string
	for e := range es.all {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

// Sets of one type share the numbering of names, each holding its own
// entries; a name no set holds any more gives its number to the next.
func TestEntriesShareNumbers(t *testing.T) {
	table := newNameTable()
	a, b := &entries{table: table}, &entries{table: table}
	ra := translate.NewResource("t", "r", []byte("a"))
	rb := translate.NewResource("t", "r", []byte("b"))
	a.put(ra)
	b.put(rb)
	b.put(translate.NewResource("t", "s", nil))
	if got, _ := a.get("r"); got != ra {
		t.Fatalf("a's r is %v, want a's own", got)
	}
	if got, _ := b.get("r"); got != rb {
		t.Fatalf("b's r is %v, want b's own", got)
	}
	if _, ok := a.get("s"); ok {
		t.Fatal("a holds s, which only b was given")
	}
	if a.len() != 1 || b.len() != 2 {
		t.Fatalf("a holds %d and b %d entries, want 1 and 2", a.len(), b.len())
	}

	a.remove("r")
	if _, ok := table.number["r"]; !ok {
		t.Fatal("r lost its number while b still holds it")
	}
	b.release()
	if len(table.number) != 0 || len(table.free) != 2 {
		t.Fatalf("with no set holding them, %d names keep numbers and %d are free; want 0 and 2", len(table.number), len(table.free))
	}
	// Freed numbers are reused: the table does not grow with names that
	// come and go.
	a.put(translate.NewResource("t", "u", nil))
	b.put(translate.NewResource("t", "v", nil))
	b.put(translate.NewResource("t", "u", nil))
	if len(table.holders) != 2 {
		t.Fatalf("the table numbers %d names, want its 2 freed numbers reused", len(table.holders))
	}
	if got := heldNames(a); !slices.Equal(got, []string{"u"}) {
		t.Fatalf("a holds %v, want [u]", got)
	}
	if got := heldNames(b); !slices.Equal(got, []string{"u", "v"}) {
		t.Fatalf("b holds %v, want [u v]", got)
	}
	a.remove("absent")
	a.remove("u")
	a.remove("u")
	if a.len() != 0 || table.holders[table.number["u"]] != 1 {
		t.Fatalf("after removing u twice from a: a holds %d, u has %d holders; want 0 and 1 (b)", a.len(), table.holders[table.number["u"]])
	}
}

// A set of a type whose sets do not share names keeps a map of its own,
// with the same behaviour.
func TestEntriesOfTheirOwn(t *testing.T) {
	es := newEntries(nil)
	es.put(translate.NewResource("t", "r", []byte("1")))
	r2 := translate.NewResource("t", "r", []byte("2"))
	es.put(r2)
	es.put(translate.NewResource("t", "s", nil))
	es.remove("absent")
	if got, _ := es.get("r"); got != r2 || es.len() != 2 {
		t.Fatalf("r is %v and the set holds %d, want the replacement and 2", got, es.len())
	}
	es.remove("s")
	if got := heldNames(&es); !slices.Equal(got, []string{"r"}) || es.len() != 1 {
		t.Fatalf("after removing s: %v (%d), want [r]", got, es.len())
	}
}

// A dropped view releases its names: a cache that served views of names
// long gone does not keep numbering them.
func TestCacheDropReleasesNames(t *testing.T) {
	c := NewCache()
	const eds = resources.EndpointType
	r := translate.NewResource(eds, "gone", nil)
	c.Apply(translate.SetUpdate{TypeURL: eds, View: "a", Upserts: []*translate.Resource{r}})
	c.Apply(translate.SetUpdate{TypeURL: eds, View: "b", Upserts: []*translate.Resource{r}})
	c.Apply(translate.SetUpdate{TypeURL: eds, View: "a", Drop: true})
	if len(c.names[eds].number) != 1 {
		t.Fatalf("with view b holding it, %d names are numbered; want 1", len(c.names[eds].number))
	}
	c.Apply(translate.SetUpdate{TypeURL: eds, View: "b", Drop: true})
	if n := len(c.names[eds].number); n != 0 {
		t.Fatalf("with every view dropped, %d names are still numbered", n)
	}
}

// A set's first revision lists none of its names (a view's first build
// holds every service's), yet counts as a change to each of them: a proxy
// that holds nothing of the set is behind, the ACK of the first version
// carries its observed time, and a client synced before it is compared in
// full.
func TestFirstRevisionTouchesEveryName(t *testing.T) {
	c := NewCache()
	observed := time.Unix(100, 0)
	c.ApplyObserved(translate.SetUpdate{TypeURL: "t", View: "v", Upserts: []*translate.Resource{
		translate.NewResource("t", "a", nil), translate.NewResource("t", "b", nil),
	}}, observed)
	s := c.sets[setKey{"t", "v"}]
	if len(s.recent) != 1 || !s.recent[0].every || s.recent[0].names != nil {
		t.Fatalf("the first revision is logged as %+v, want every name and no list", s.recent)
	}
	watches := func(name string) func([]string) bool {
		return func(names []string) bool { return slices.Contains(names, name) }
	}
	if behind, since := c.Behind("t", "v", 0, watches("b")); !behind || !since.Equal(observed) {
		t.Fatalf("a proxy holding nothing: behind %v since %v, want behind since %v", behind, since, observed)
	}
	rev, times, ok := c.Acked("t", "v", 0, s.version, watches("a"))
	if !ok || rev != 1 || !slices.Equal(times, []time.Time{observed}) {
		t.Fatalf("the first version acked: revision %d, observed %v, ok %v; want 1, [%v], true", rev, times, ok, observed)
	}
	if _, ok := s.changedSince(0); ok {
		t.Fatal("the log answered what changed since before the set was made")
	}
	c.Apply(translate.SetUpdate{TypeURL: "t", View: "v", Upserts: []*translate.Resource{translate.NewResource("t", "a", []byte("2"))}})
	if got, ok := s.changedSince(1); !ok || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("changed since the first revision: %v (%v), want [a]", got, ok)
	}
}
