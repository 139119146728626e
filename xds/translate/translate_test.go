package translate

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/xdstest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// A step is one call of Translate in a sequence: what changes in the
// clusterset before it, and the views in use.
type step struct {
	name   string
	change func(*xdstest.Clusterset)
	views  []View
}

var (
	eastView    = eastZone("us-east1-a")
	westView    = ViewFor(resourcev3.EndpointType, resources.View{Network: "network-west", Locality: resources.Locality{Region: "us-west1", Zone: "us-west1-a"}})
	eastAddress = ViewFor(AddressType, resources.View{Network: "network-east"})
)

// eastZone is the EDS view of proxies in a zone of east's region and
// network.
func eastZone(zone string) View {
	return ViewFor(resourcev3.EndpointType, resources.View{Network: "network-east", Locality: resources.Locality{Region: "us-east1", Zone: zone}})
}

func echo(ports ...*federationpb.ServicePort) *federationpb.Service {
	if len(ports) == 0 {
		ports = []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, TargetPort: 9090}}
	}
	return &federationpb.Service{
		Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local",
		Type:  federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Ports: ports,
		Export: &federationpb.Export{
			Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT,
			Time:   timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		},
	}
}

// pod is a ready endpoint of echo and its workload.
type pod struct{ name, ip, region, zone string }

func (p pod) endpoint() *federationpb.Endpoint {
	return &federationpb.Endpoint{
		Namespace: "demo", Service: "echo", Address: p.ip, Ready: true, Serving: true,
		Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}},
		Locality: &federationpb.Locality{Region: p.region, Zone: p.zone},
		Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: p.name},
	}
}

func (p pod) workload() *federationpb.Workload {
	return &federationpb.Workload{
		Uid: "uid-" + p.name, Namespace: "demo", Name: p.name, Ips: []string{p.ip}, ServiceAccount: "echo",
		Locality: &federationpb.Locality{Region: p.region, Zone: p.zone}, Ready: true, Ambient: true,
	}
}

func endpoints(pods ...pod) []*federationpb.Endpoint {
	var out []*federationpb.Endpoint
	for _, p := range pods {
		out = append(out, p.endpoint())
	}
	return out
}

var (
	east1 = pod{"echo-east-1", "10.1.0.1", "us-east1", "us-east1-a"}
	east2 = pod{"echo-east-2", "10.1.0.2", "us-east1", "us-east1-b"}
	west1 = pod{"echo-west-1", "10.2.0.1", "us-west1", "us-west1-a"}
)

func eastCluster() clusterset.ClusterInfo {
	return clusterset.ClusterInfo{
		ID: "east", Network: "network-east", TrustDomain: "cluster.local",
		Gateways: []*federationpb.Gateway{{Address: "192.0.2.1", Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, Service: "istio-system/eastwest"}},
	}
}

func westCluster(gatewayIP string) clusterset.ClusterInfo {
	return clusterset.ClusterInfo{
		ID: "west", Network: "network-west", TrustDomain: "cluster.local",
		Gateways: []*federationpb.Gateway{
			{Address: gatewayIP, Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, Service: "istio-system/eastwest"},
			{Address: gatewayIP, Port: 15008, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE, Service: "istio-system/eastwest"},
		},
	}
}

// twoClusters is echo exported from east (two pods) and west (one pod),
// on two networks.
func twoClusters(c *xdstest.Clusterset) {
	c.SetCluster(eastCluster())
	c.SetCluster(westCluster("192.0.2.2"))
	c.SetService("east", echo(), endpoints(east1, east2)...)
	c.SetService("west", echo(), endpoints(west1)...)
	for _, p := range []pod{east1, east2} {
		c.SetWorkload("east", p.workload())
	}
	c.SetWorkload("west", west1.workload())
}

// sequences are the golden sequences, each in testdata/<name>.golden.
var sequences = map[string][]step{
	// Proxies come and go; an endpoint change touches EDS and addresses
	// only; a port change touches every type; a gateway change every
	// view's EDS; an unexported service is removed everywhere.
	"lifecycle": {
		{name: "first snapshot, no proxy yet", change: twoClusters},
		{name: "a gRPC client in east and a ztunnel in east connect", views: []View{eastView, eastAddress}},
		{name: "a client in west connects", views: []View{eastView, westView, eastAddress}},
		{name: "east's second pod goes", views: []View{eastView, westView, eastAddress}, change: func(c *xdstest.Clusterset) {
			c.SetService("east", echo(), endpoints(east1)...)
			c.RemoveWorkload("east", "uid-"+east2.name)
		}},
		{name: "echo gains a port in both clusters", views: []View{eastView, westView, eastAddress}, change: func(c *xdstest.Clusterset) {
			ports := []*federationpb.ServicePort{
				{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, TargetPort: 9090},
				{Name: "admin", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9901, TargetPort: 9901},
			}
			c.SetService("east", echo(ports...), endpoints(east1)...)
			c.SetService("west", echo(ports...), endpoints(west1)...)
		}},
		{name: "west's gateway moves", views: []View{eastView, westView, eastAddress}, change: func(c *xdstest.Clusterset) {
			c.SetCluster(westCluster("192.0.2.3"))
		}},
		{name: "the client in west leaves", views: []View{eastView, eastAddress}},
		{name: "nothing changes", views: []View{eastView, eastAddress}},
		{name: "echo is no longer exported", views: []View{eastView, eastAddress}, change: func(c *xdstest.Clusterset) {
			c.RemoveService("east", "demo/echo")
			c.RemoveService("west", "demo/echo")
		}},
	},
	// A view that comes after the services changed gets them as they are:
	// the translator keeps the sorted service keys from one view to the
	// next.
	"late-view": {
		{name: "echo in east, a client in east", views: []View{eastView}, change: func(c *xdstest.Clusterset) {
			c.SetCluster(eastCluster())
			c.SetService("east", echo(), endpoints(east1)...)
		}},
		{name: "hello is exported too", views: []View{eastView}, change: func(c *xdstest.Clusterset) {
			c.SetService("east", hello(), helloEndpoint(east2))
		}},
		{name: "a client in another zone connects", views: []View{eastView, eastZone("us-east1-b")}},
		{name: "echo is no longer exported", views: []View{eastView, eastZone("us-east1-b")}, change: func(c *xdstest.Clusterset) {
			c.RemoveService("east", "demo/echo")
		}},
		{name: "a client in a third zone connects", views: []View{eastView, eastZone("us-east1-b"), eastZone("us-east1-c")}},
	},
}

// hello is a second service beside echo.
func hello() *federationpb.Service {
	s := echo()
	s.Name, s.Hostname = "hello", "hello.demo.svc.cluster.local"
	return s
}

func helloEndpoint(p pod) *federationpb.Endpoint {
	ep := p.endpoint()
	ep.Service = "hello"
	return ep
}

// TestTranslateSequences runs each golden sequence: a snapshot, then a
// change, and exactly the set updates the translator returns for it.
func TestTranslateSequences(t *testing.T) {
	for name, steps := range sequences {
		t.Run(name, func(t *testing.T) {
			got := render(t, run(t, steps))
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := gocmp.Diff(string(want), got); diff != "" {
				t.Errorf("set updates differ from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// collect returns what one Translate call emits, in order.
func collect(tr *Translator, snap clusterset.Snapshot, changes clusterset.Changes, views []View) ([]SetUpdate, error) {
	var out []SetUpdate
	err := tr.Translate(snap, changes, views, func(u SetUpdate) { out = append(out, u) })
	return out, err
}

// result is one step's snapshot and what Translate returned for it.
type result struct {
	step    step
	snap    clusterset.Snapshot
	updates []SetUpdate
}

func run(t *testing.T, steps []step) []result {
	t.Helper()
	c := xdstest.New()
	tr := New("cluster.local")
	snap := c.Publish()
	var out []result
	for _, s := range steps {
		changes := clusterset.Changes{}
		if s.change != nil {
			s.change(c)
			snap = c.Publish()
			changes = snap.Changes()
		}
		updates, err := collect(tr, snap, changes, s.views)
		if err != nil {
			t.Fatalf("step %q: %v", s.name, err)
		}
		out = append(out, result{s, snap, updates})
	}
	return out
}

var typeNames = map[string]string{
	resourcev3.ClusterType: "CDS", resourcev3.ListenerType: "LDS", resourcev3.RouteType: "RDS",
	resourcev3.EndpointType: "EDS", AddressType: "Address", AuthorizationType: "Authorization",
}

// render writes the updates of each step as text: per set, the names and
// versions it upserts (with their content) and removes, or that it drops.
func render(t *testing.T, results []result) string {
	t.Helper()
	var b strings.Builder
	for i, r := range results {
		fmt.Fprintf(&b, "== %d. %s\n", i+1, r.step.name)
		if len(r.updates) == 0 {
			b.WriteString("(no updates)\n")
		}
		for _, u := range r.updates {
			fmt.Fprintf(&b, "%s %q", typeNames[u.TypeURL], u.View)
			if u.Drop {
				b.WriteString(" drop\n")
				continue
			}
			fmt.Fprintf(&b, " +%d -%d\n", len(u.Upserts), len(u.Removals))
			upserts := slices.SortedFunc(slices.Values(u.Upserts), func(a, b *Resource) int { return strings.Compare(a.Name, b.Name) })
			for _, res := range upserts {
				m, err := res.Any().UnmarshalNew()
				if err != nil {
					t.Fatalf("%s: %v", res.Name, err)
				}
				js, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				// protojson's spacing is not stable between runs: normalise it.
				text := strings.ReplaceAll(string(js), ":  ", ": ")
				fmt.Fprintf(&b, "  + %s %s\n    %s\n", res.Name, res.Version, strings.ReplaceAll(text, "\n", "\n    "))
			}
			for _, name := range u.Removals {
				fmt.Fprintf(&b, "  - %s\n", name)
			}
		}
	}
	return b.String()
}

// sets is what a cache holds after applying updates: versions by name, by
// set.
type sets map[string]map[string]string

func (s sets) apply(updates []SetUpdate) {
	for _, u := range updates {
		k := u.TypeURL + " " + u.View
		if u.Drop {
			delete(s, k)
			continue
		}
		if s[k] == nil {
			s[k] = map[string]string{}
		}
		for _, r := range u.Upserts {
			s[k][r.Name] = r.Version
		}
		for _, n := range u.Removals {
			delete(s[k], n)
		}
	}
}

// TestTranslateIncrementalEqualsFull: after every step of every
// sequence, the sets built incrementally hold exactly what a new
// translator builds from that step's snapshot alone.
func TestTranslateIncrementalEqualsFull(t *testing.T) {
	for name, steps := range sequences {
		t.Run(name, func(t *testing.T) {
			incremental := sets{}
			for _, r := range run(t, steps) {
				incremental.apply(r.updates)
				fresh, err := collect(New("cluster.local"), r.snap, clusterset.Changes{}, r.step.views)
				if err != nil {
					t.Fatal(err)
				}
				full := sets{}
				full.apply(fresh)
				if diff := gocmp.Diff(full, incremental, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("after %q, incremental sets differ from a full build (-full +incremental):\n%s", r.step.name, diff)
				}
			}
		})
	}
}

// TestTranslateDeterministic: two translators fed the same sequence
// return the same updates, in the same order.
func TestTranslateDeterministic(t *testing.T) {
	for name, steps := range sequences {
		a, b := render(t, run(t, steps)), render(t, run(t, steps))
		if a != b {
			t.Errorf("%s: two runs differ", name)
		}
	}
}

// TestTranslateSharesEncodings: proxies whose views see a service alike
// get the same encoded assignment, encoded once.
func TestTranslateSharesEncodings(t *testing.T) {
	c := xdstest.New()
	twoClusters(c)
	snap := c.Publish()
	// Two zones of east's region that hold no endpoint of echo rank its
	// localities alike.
	v1 := eastZone("us-east1-c")
	v2 := eastZone("us-east1-d")
	tr := New("cluster.local")
	if _, err := collect(tr, snap, clusterset.Changes{}, nil); err != nil {
		t.Fatal(err)
	}
	before := tr.Encodes()
	updates, err := collect(tr, snap, clusterset.Changes{}, []View{v1, v2})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := snap.Service("demo/echo")
	want := int64(len(resources.Hostnames(v)) * len(resources.Ports(v)))
	if got := tr.Encodes() - before; got != want {
		t.Errorf("%d encodes for two views that see echo alike, want %d (one per cluster name)", got, want)
	}
	byView := map[string]*Resource{}
	for _, u := range updates {
		if len(u.Upserts) > 0 {
			byView[u.View] = u.Upserts[0]
		}
	}
	if len(byView) != 2 || byView[v1.Key] != byView[v2.Key] {
		t.Errorf("the two views got %v, want one shared resource", slices.Sorted(maps.Keys(byView)))
	}
}

// TestTranslateSharesEncodingsAcrossCalls: a view that comes in a later
// call (as most proxies do, connecting one after another) gets the
// encodings an earlier view of the same ranks got, unless its service
// changed in between; a dropped view's encodings are not kept.
func TestTranslateSharesEncodingsAcrossCalls(t *testing.T) {
	c := xdstest.New()
	twoClusters(c)
	snap := c.Publish()
	v1 := eastZone("us-east1-c")
	v2 := eastZone("us-east1-d")
	v3 := eastZone("us-east1-e")
	tr := New("cluster.local")
	first, err := collect(tr, snap, clusterset.Changes{}, []View{v1})
	if err != nil {
		t.Fatal(err)
	}
	before := tr.Encodes()
	second, err := collect(tr, snap, clusterset.Changes{}, []View{v1, v2})
	if err != nil {
		t.Fatal(err)
	}
	if n := tr.Encodes() - before; n != 0 {
		t.Errorf("%d encodes for a view that sees echo as the one before it, want none", n)
	}
	if a, b := edsOf(first, v1), edsOf(second, v2); a == nil || a != b {
		t.Errorf("the later view got %v, want the earlier view's %v", b, a)
	}

	// echo changes: a view that comes after gets the new endpoints, as a
	// translator that starts afresh builds them.
	c.SetService("east", echo(), endpoints(east1)...)
	snap = c.Publish()
	if _, err := collect(tr, snap, snap.Changes(), []View{v1, v2}); err != nil {
		t.Fatal(err)
	}
	third, err := collect(tr, snap, clusterset.Changes{}, []View{v1, v2, v3})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := collect(New("cluster.local"), snap, clusterset.Changes{}, []View{v3})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := edsOf(third, v3), edsOf(fresh, v3); got == nil || want == nil || got.Version != want.Version {
		t.Errorf("the view that came after the change got %v, want %v", got, want)
	}

	// Once a view is dropped, what only it used is not kept.
	if _, err := collect(tr, snap, clusterset.Changes{}, []View{v1}); err != nil {
		t.Fatal(err)
	}
	if n := len(tr.envoy.eds); n != 0 {
		t.Errorf("assignments kept after a view was dropped: %d services", n)
	}
}

// edsOf returns the first load assignment the updates give view.
func edsOf(updates []SetUpdate, view View) *Resource {
	for _, u := range updates {
		if u.View == view.Key && u.TypeURL == resourcev3.EndpointType && len(u.Upserts) > 0 {
			return u.Upserts[0]
		}
	}
	return nil
}

// TestTranslateAddressesFromTheFirstZtunnel: no workload API is built
// while no ztunnel asks for it; the first one gets the same addresses as
// a translator that built them from the start.
func TestTranslateAddressesFromTheFirstZtunnel(t *testing.T) {
	c := xdstest.New()
	twoClusters(c)
	snap := c.Publish()
	tr := New("cluster.local")
	before, err := collect(tr, snap, clusterset.Changes{}, []View{eastView})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tr.ambient.items); n != 0 {
		t.Errorf("%d addresses built with no ztunnel connected, want none", n)
	}
	after, err := collect(tr, snap, clusterset.Changes{}, []View{eastView, eastAddress})
	if err != nil {
		t.Fatal(err)
	}
	lazy := sets{}
	lazy.apply(before)
	lazy.apply(after)
	fresh, err := collect(New("cluster.local"), snap, clusterset.Changes{}, []View{eastView, eastAddress})
	if err != nil {
		t.Fatal(err)
	}
	full := sets{}
	full.apply(fresh)
	if diff := gocmp.Diff(full, lazy, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the first ztunnel's sets differ from a full build (-full +lazy):\n%s", diff)
	}
	if len(tr.ambient.items) == 0 {
		t.Error("no addresses built for the first ztunnel")
	}
}
