package imports

import (
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/federation/federationpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func imp(name string, clusters ...string) *federationpb.Import {
	im := &federationpb.Import{Namespace: "ns", Name: name, Type: federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP, Clusters: clusters}
	for _, c := range clusters {
		im.Sources = append(im.Sources, &federationpb.ImportSource{Cluster: c})
	}
	return im
}

func keys(s *Set) []string {
	if s == nil {
		return nil
	}
	var out []string
	for k := range s.Imports {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func changedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestStorePrefersALinkWithACompleteSet(t *testing.T) {
	s := NewStore()
	b, a := s.Link("hub-b:9443"), s.Link("hub-a:9443")
	if set, _ := s.Current(); set != nil {
		t.Fatalf("a set before any replica sent one: %v", set)
	}
	b.Start()
	a.Start()
	_, ch := s.Current()
	b.Received(&federationpb.Imports{Version: 1, Full: true, Imports: []*federationpb.Import{imp("x", "east")}})
	set, _ := s.Current()
	if !changedNow(ch) || set.Hub != "hub-b:9443" || !slices.Equal(keys(set), []string{"ns/x"}) {
		t.Fatalf("after b's full set: %+v", set)
	}
	// A delta before a full set is ignored.
	a.Received(&federationpb.Imports{Version: 2, Imports: []*federationpb.Import{imp("y", "east")}})
	if set, _ := s.Current(); set.Hub != "hub-b:9443" {
		t.Fatalf("a delta without a base made %s preferred", set.Hub)
	}
	// a's full set, in two parts of one import: a is preferred (lower address).
	a.Received(&federationpb.Imports{Version: 3, Full: true, Imports: []*federationpb.Import{imp("x", "east", "west"), {Namespace: "ns", Name: "x", Sources: []*federationpb.ImportSource{{Cluster: "north"}}}}})
	set, _ = s.Current()
	if set.Hub != "hub-a:9443" || len(set.Imports["ns/x"].GetSources()) != 3 {
		t.Fatalf("after a's set: hub %s, import %v", set.Hub, set.Imports["ns/x"])
	}
	// A delta replaces and removes.
	old := set
	a.Received(&federationpb.Imports{Version: 4, Imports: []*federationpb.Import{imp("z", "west")}, Removed: []string{"ns/x"}})
	set, _ = s.Current()
	if !slices.Equal(keys(set), []string{"ns/z"}) || !slices.Equal(keys(old), []string{"ns/x"}) {
		t.Fatalf("after a delta: %v (the old set became %v)", keys(set), keys(old))
	}
	// a's stream ends: b's set is preferred; both end: the last set stays.
	a.Stop()
	if set, _ = s.Current(); set.Hub != "hub-b:9443" {
		t.Fatalf("after a stopped: %s", set.Hub)
	}
	b.Stop()
	b.Close()
	a.Close()
	if set, _ = s.Current(); set == nil || set.Hub != "hub-b:9443" {
		t.Fatalf("with no replica left the set went: %v", set)
	}
}

func TestHeldReportsFullThenChanges(t *testing.T) {
	s := NewStore()
	l := s.Link("hub:9443")
	defer l.Close()
	l.Start()
	h := s.Held()
	h.Set(&federationpb.HeldImport{Namespace: "ns", Name: "a", Ips: []string{"240.242.0.1"}, Clusters: []string{"east"}})
	if r := l.NextHeld(1 << 20); r != nil || changedNow(l.HeldChanged()) {
		t.Fatalf("reported before the writer listed the cluster: %v", r)
	}
	h.Synced()
	if !changedNow(l.HeldChanged()) {
		t.Fatal("no signal once synced")
	}
	r := l.NextHeld(1 << 20)
	if len(r) != 1 || !r[0].GetFull() || len(r[0].GetImports()) != 1 {
		t.Fatalf("first report %v, want the full one", r)
	}
	if r := l.NextHeld(1 << 20); r != nil {
		t.Fatalf("second report with nothing new: %v", r)
	}
	h.Set(&federationpb.HeldImport{Namespace: "ns", Name: "b", NoNamespace: true})
	h.Delete("ns/a")
	h.Set(&federationpb.HeldImport{Namespace: "ns", Name: "b", NoNamespace: true}) // the same again: no change
	r = l.NextHeld(1 << 20)
	if len(r) != 1 || r[0].GetFull() || len(r[0].GetImports()) != 1 || !slices.Equal(r[0].GetRemoved(), []string{"ns/a"}) {
		t.Fatalf("delta %v", r)
	}
	// A new stream reports in full again; a small bound splits it.
	for i := range 50 {
		h.Set(&federationpb.HeldImport{Namespace: "ns", Name: "svc-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Ips: []string{"240.242.0.1"}})
	}
	l.Start()
	r = l.NextHeld(256)
	n := 0
	for i, c := range r {
		if !c.GetFull() || c.GetMore() != (i < len(r)-1) {
			t.Fatalf("chunk %d of %d: full %v more %v", i, len(r), c.GetFull(), c.GetMore())
		}
		n += len(c.GetImports())
	}
	if len(r) < 2 || n != 51 {
		t.Fatalf("%d chunks with %d imports, want several with 51", len(r), n)
	}
}

func TestSetChanged(t *testing.T) {
	a, b, b2, c := &federationpb.Import{Name: "a"}, &federationpb.Import{Name: "b"}, &federationpb.Import{Name: "b"}, &federationpb.Import{Name: "c"}
	prev := &Set{Imports: map[string]*federationpb.Import{"ns/a": a, "ns/b": b, "ns/c": c}}
	next := &Set{Imports: map[string]*federationpb.Import{"ns/a": a, "ns/b": b2, "ns/d": c}}
	changed := func(s, prev *Set) []string {
		var out []string
		s.Changed(prev, func(k string) { out = append(out, k) })
		slices.Sort(out)
		return out
	}
	if got := changed(next, prev); !slices.Equal(got, []string{"ns/b", "ns/c", "ns/d"}) {
		t.Errorf("changed %v, want b (replaced), c (removed) and d (added)", got)
	}
	if got := changed(next, nil); !slices.Equal(got, []string{"ns/a", "ns/b", "ns/d"}) {
		t.Errorf("changed from nothing %v, want every import", got)
	}
	if got := changed(next, next); len(got) != 0 {
		t.Errorf("changed from itself %v", got)
	}
}

// TestLinkJoinsParts: the parts of one import add up, every field of a
// source with them (what a remote view needs, the workloads); the
// members' clusters stay until a set carries others.
func TestLinkJoinsParts(t *testing.T) {
	s := NewStore()
	l := s.Link("hub-a:9443")
	l.Start()
	ep := func(addr string) *federationpb.Endpoint { return &federationpb.Endpoint{Address: addr} }
	head := imp("x")
	parts := []*federationpb.Import{
		head,
		{Namespace: "ns", Name: "x", Sources: []*federationpb.ImportSource{{
			Cluster: "west", Network: "n2", ClusterIps: []string{"10.0.0.1"}, Endpoints: []*federationpb.Endpoint{ep("192.0.2.1")}, ViaGateway: true,
			ClusterEndpoints: []*federationpb.Endpoint{ep("10.2.0.1")},
		}}},
		{Namespace: "ns", Name: "x", Sources: []*federationpb.ImportSource{{
			Cluster: "west", ClusterEndpoints: []*federationpb.Endpoint{ep("10.2.0.2")}, Workloads: []*federationpb.Workload{{Uid: "a"}, {Uid: "b"}},
		}}},
	}
	clusters := []*federationpb.Cluster{{Id: "east"}, {Id: "west"}}
	l.Received(&federationpb.Imports{Version: 1, Full: true, Imports: parts, Clusters: clusters})
	set, _ := s.Current()
	src := set.Imports["ns/x"].GetSources()
	if len(src) != 1 || src[0].GetNetwork() != "n2" || len(src[0].GetClusterIps()) != 1 || len(src[0].GetEndpoints()) != 1 ||
		len(src[0].GetClusterEndpoints()) != 2 || len(src[0].GetWorkloads()) != 2 || !src[0].GetViaGateway() {
		t.Errorf("joined source %v", src)
	}
	if len(set.Clusters) != 2 {
		t.Errorf("clusters %v", set.Clusters)
	}
	l.Received(&federationpb.Imports{Version: 2, Removed: []string{"ns/x"}})
	if set, _ := s.Current(); len(set.Clusters) != 2 {
		t.Errorf("a delta without clusters dropped them: %v", set.Clusters)
	}
	l.Received(&federationpb.Imports{Version: 3, Clusters: clusters[:1]})
	if set, _ := s.Current(); len(set.Clusters) != 1 {
		t.Errorf("a delta with clusters did not replace them: %v", set.Clusters)
	}
}
