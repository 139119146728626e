package registry

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/clustersetip"
)

// exported is svc exported with a ServiceExport created age before a fixed
// time, dual-stack.
func exported(name string, age time.Duration) *federationpb.Service {
	s := svc(name)
	s.Export.Time = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age))
	s.IpFamilies = []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4, federationpb.IPFamily_IP_FAMILY_IPV6}
	return s
}

func view(t *testing.T, r *Registry, key string) *clusterset.ServiceView {
	t.Helper()
	v, ok := r.Current().Service(key)
	if !ok {
		t.Fatalf("no service %s", key)
	}
	return v
}

// decided returns the decisions on the import key.
func decided(r *Registry, key string) clusterset.Import { return r.Current().Import(key) }

func ipStrings(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, a := range ips {
		out[i] = a.String()
	}
	return out
}

func held(ns, name string, ips []string, clusters ...string) *federationpb.HeldImport {
	return &federationpb.HeldImport{Namespace: ns, Name: name, Ips: ips, Clusters: clusters}
}

func TestImportsGetClustersetIPs(t *testing.T) {
	pools, err := clustersetip.ParsePools("10.99.0.0/24,fd00:99::/112")
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{ClustersetPools: pools})
	east, west := r.Connect("east", ""), r.Connect("west", "")
	headless := exported("db", time.Hour)
	headless.Type = federationpb.ServiceType_SERVICE_TYPE_HEADLESS
	labelled := exported("web", time.Hour)
	labelled.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_LABEL
	if err := east.Apply("s", full("east", "n1", 1, []*federationpb.Service{exported("echo", time.Hour), headless, labelled}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	view(t, r, "demo/echo")
	echo := decided(r, "demo/echo")
	if len(echo.ClustersetIPs) != 2 || !pools.V4.Contains(echo.ClustersetIPs[0]) || !pools.V6.Contains(echo.ClustersetIPs[1]) || echo.IPError != "" {
		t.Fatalf("echo's ClusterSetIPs %v (%q), want one of each pool", echo.ClustersetIPs, echo.IPError)
	}
	if v, d := view(t, r, "demo/db"), decided(r, "demo/db"); len(d.ClustersetIPs) != 0 || !v.IsImport() {
		t.Errorf("headless import db got IPs %v", d.ClustersetIPs)
	}
	if v, d := view(t, r, "demo/web"), decided(r, "demo/web"); len(d.ClustersetIPs) != 0 || v.IsImport() {
		t.Errorf("label-exported web is an import with IPs %v", d.ClustersetIPs)
	}
	// Another cluster joining the export changes nothing of the IPs.
	if err := west.Apply("s", full("west", "n2", 1, []*federationpb.Service{exported("echo", 0)}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if got, d := view(t, r, "demo/echo"), decided(r, "demo/echo"); !slices.Equal(d.ClustersetIPs, echo.ClustersetIPs) || len(got.Clusters) != 2 {
		t.Errorf("after west joined: %v, want %v", d.ClustersetIPs, echo.ClustersetIPs)
	}
}

// A hub that starts anew learns the IPs it handed out from what the
// clusters hold, and hands out the same, whatever its hashes say.
func TestImportsKeepHeldIPsAcrossRestarts(t *testing.T) {
	r := New(Config{})
	east := r.Connect("east", "")
	east.SetImporter()
	held1 := &federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{
		held("demo", "echo", []string{"240.242.7.7", "fd6d:6673:6574::7"}, "east"),
	}}
	if err := east.ApplyHeld(held1); err != nil {
		t.Fatal(err)
	}
	if err := east.Apply("s", full("east", "n1", 1, []*federationpb.Service{exported("echo", time.Hour)}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	want := []string{"240.242.7.7", "fd6d:6673:6574::7"}
	if got := ipStrings(decided(r, "demo/echo").ClustersetIPs); !slices.Equal(got, want) {
		t.Fatalf("ClusterSetIPs %v, want the held %v", got, want)
	}
	// A claim that arrives after the import changes it to what the
	// clusters hold.
	if err := east.ApplyHeld(&federationpb.ImportsHeld{Imports: []*federationpb.HeldImport{held("demo", "echo", []string{"240.242.8.8"}, "east")}}); err != nil {
		t.Fatal(err)
	}
	if got := ipStrings(decided(r, "demo/echo").ClustersetIPs); got[0] != "240.242.8.8" {
		t.Fatalf("ClusterSetIPs %v after the claim moved", got)
	}
}

// A change of the decisions alone publishes the service as changed, with
// the view it had: the merge of the exports did not change.
func TestImportDecisionsLeaveTheViewAlone(t *testing.T) {
	r := New(Config{})
	east := r.Connect("east", "")
	east.SetImporter()
	must(t, east.Apply("s", full("east", "n1", 1, []*federationpb.Service{exported("echo", time.Hour)}, nil, nil)))
	before := r.Current()
	v, _ := before.Service("demo/echo")
	must(t, east.ApplyHeld(&federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{held("demo", "echo", []string{"240.242.9.9"}, "east")}}))
	after := r.Current()
	if after.Revision() != before.Revision()+1 || !slices.Equal(after.Changes().Services, []string{"demo/echo"}) {
		t.Fatalf("revision %d after %d, changes %+v: want one revision that names demo/echo", after.Revision(), before.Revision(), after.Changes())
	}
	if w, _ := after.Service("demo/echo"); w != v {
		t.Error("the decisions changed the service's view")
	}
	if got, old := after.Import("demo/echo"), before.Import("demo/echo"); got.Equal(old) || ipStrings(got.ClustersetIPs)[0] != "240.242.9.9" || !slices.Equal(got.Ready, []federation.ClusterID{"east"}) {
		t.Errorf("decisions %+v after %+v, want the held IP and east ready", got, old)
	}
	// The same report again changes nothing: no revision.
	must(t, east.ApplyHeld(&federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{held("demo", "echo", []string{"240.242.9.9"}, "east")}}))
	if r.Current().Revision() != after.Revision() {
		t.Errorf("revision %d after the same report, want %d", r.Current().Revision(), after.Revision())
	}
}

func TestImportsReady(t *testing.T) {
	r := New(Config{})
	east, west := r.Connect("east", ""), r.Connect("west", "")
	east.SetImporter()
	west.SetImporter()
	if err := east.Apply("s", full("east", "n1", 1, []*federationpb.Service{exported("echo", time.Hour)}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if err := west.Apply("s", full("west", "n2", 1, []*federationpb.Service{exported("echo", 0)}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if v := decided(r, "demo/echo"); len(v.Ready) != 0 {
		t.Fatalf("ready %v before any cluster holds the import", v.Ready)
	}
	ips := ipStrings(decided(r, "demo/echo").ClustersetIPs)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(east.ApplyHeld(&federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{held("demo", "echo", ips, "east", "west")}}))
	must(west.ApplyHeld(&federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{held("demo", "echo", ips, "east")}}))
	if got := decided(r, "demo/echo").Ready; !slices.Equal(got, []federation.ClusterID{"east"}) {
		t.Fatalf("ready %v, want east only (west's ServiceImport does not list west yet)", got)
	}
	must(west.ApplyHeld(&federationpb.ImportsHeld{Imports: []*federationpb.HeldImport{held("demo", "echo", ips, "east", "west")}}))
	if got := decided(r, "demo/echo").Ready; !slices.Equal(got, []federation.ClusterID{"east", "west"}) {
		t.Fatalf("ready %v, want both", got)
	}
	// A third importer that has no namespace demo holds nothing, by
	// design: it does not hold the exports back. One that has not
	// reported does.
	north := r.Connect("north", "")
	north.SetImporter()
	if got := decided(r, "demo/echo").Ready; len(got) != 0 {
		t.Fatalf("ready %v with an importer that has not reported", got)
	}
	must(north.ApplyHeld(&federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{{Namespace: "demo", Name: "echo", NoNamespace: true}}}))
	if got := decided(r, "demo/echo").Ready; len(got) != 2 {
		t.Fatalf("ready %v, want both again", got)
	}
}

func TestImportsHeldRejectsBadReports(t *testing.T) {
	r := New(Config{})
	c := r.Connect("east", "")
	for _, tc := range []struct {
		h    *federationpb.HeldImport
		want string
	}{
		{&federationpb.HeldImport{Namespace: "demo", Name: "Bad_Name"}, "name"},
		{&federationpb.HeldImport{Namespace: "demo", Name: "echo", Ips: []string{"not-an-ip"}}, `ips[0]: "not-an-ip" is not an IP address`},
		{&federationpb.HeldImport{Namespace: "demo", Name: "echo", Ips: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}}, "more than 2"},
		{&federationpb.HeldImport{Namespace: "demo", Name: "echo", NoNamespace: true, Clusters: []string{"east"}}, "does not exist"},
	} {
		err := c.ApplyHeld(&federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{tc.h}})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `cluster "east"`) {
			t.Errorf("ApplyHeld(%v) = %v, want an error naming the cluster and %q", tc.h, err, tc.want)
		}
	}
}

// FuzzApplyHeld applies arbitrary reports of imports held over a registry
// with imports: it must never panic, a rejected report must change
// nothing, and no two imports may ever share a ClusterSetIP.
func FuzzApplyHeld(f *testing.F) {
	seed, _ := proto.Marshal(&federationpb.ImportsHeld{Full: true, Imports: []*federationpb.HeldImport{
		held("demo", "a", []string{"10.99.0.1"}, "east"), held("demo", "b", []string{"10.99.0.1", "fd00::1"}, "east", "west"),
	}})
	f.Add(seed)
	seed, _ = proto.Marshal(&federationpb.ImportsHeld{Imports: []*federationpb.HeldImport{{Namespace: "demo", Name: "c", NoNamespace: true}}, Removed: []string{"demo/a"}})
	f.Add(seed)
	pools, err := clustersetip.ParsePools("10.99.0.0/29,fd00::/125")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h federationpb.ImportsHeld
		if proto.Unmarshal(data, &h) != nil {
			return
		}
		r := New(Config{ClustersetPools: pools})
		east := r.Connect("east", "")
		east.SetImporter()
		must(t, east.Apply("s", full("east", "n1", 1, []*federationpb.Service{exported("a", 3*time.Hour), exported("b", 2*time.Hour), exported("c", time.Hour)}, nil, nil)))
		before := r.Current()
		if err := east.ApplyHeld(&h); err != nil && r.Current() != before {
			t.Fatalf("rejected report %v changed the registry", err)
		}
		seen := map[netip.Addr]string{}
		for _, v := range r.Current().Services() {
			for _, a := range r.Current().Import(v.Key).ClustersetIPs {
				if !a.IsValid() {
					continue
				}
				if other, dup := seen[a]; dup {
					t.Fatalf("%s and %s share %s", other, v.Key, a)
				}
				seen[a] = v.Key
			}
		}
	})
}

// BenchmarkImportsHeap measures what MCS imports cost the hub's heap
// beyond the services themselves: 5,000 services exported by three
// clusters, with ServiceExports (imports: ClusterSetIPs, Ready, each
// cluster's report of what it holds) against with the export label.
func BenchmarkImportsHeap(b *testing.B) {
	const n = 5000
	heap := func(mcs bool) uint64 {
		r := New(Config{})
		for c, id := range []string{"east", "west", "north"} {
			var services []*federationpb.Service
			var held []*federationpb.HeldImport
			for i := range n {
				s := exported(fmt.Sprintf("svc-%d", i), time.Duration(c)*time.Hour)
				if !mcs {
					s.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_LABEL
				}
				services = append(services, s)
				held = append(held, held1(fmt.Sprintf("svc-%d", i), id))
			}
			conn := r.Connect(federation.ClusterID(id), "")
			must(b, conn.Apply("s", full(id, "n1", 1, services, nil, nil)))
			if mcs {
				conn.SetImporter()
				must(b, conn.ApplyHeld(&federationpb.ImportsHeld{Full: true, Imports: held}))
			}
		}
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		runtime.KeepAlive(r)
		return m.HeapAlloc
	}
	var imports, plain uint64
	for b.Loop() {
		plain = heap(false)
		imports = heap(true)
	}
	b.ReportMetric(float64(int64(imports)-int64(plain))/n, "B/import")
}

func held1(name, cluster string) *federationpb.HeldImport {
	return &federationpb.HeldImport{Namespace: "demo", Name: name, Clusters: []string{cluster}}
}
