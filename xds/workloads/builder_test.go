package workloads

import (
	"cmp"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
	"istio.io/istio/pkg/workloadapi"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fakeSnapshot is a clusterset built with clusterset's own merge, edited
// in place by the tests between pushes (the builder reads what Push is
// told changed).
type fakeSnapshot struct {
	clusters  []*clusterset.ClusterInfo
	services  map[string]*clusterset.ServiceView
	imports   map[string]clusterset.Import
	workloads map[string]clusterset.TaggedWorkload
}

var _ clusterset.Snapshot = (*fakeSnapshot)(nil)

func (f *fakeSnapshot) Revision() uint64                    { return 1 }
func (f *fakeSnapshot) Changes() clusterset.Changes         { return clusterset.Changes{} }
func (f *fakeSnapshot) Done() <-chan struct{}               { return nil }
func (f *fakeSnapshot) Next() clusterset.Snapshot           { return nil }
func (f *fakeSnapshot) ServiceCount() int                   { return len(f.services) }
func (f *fakeSnapshot) WorkloadCount() int                  { return len(f.workloads) }
func (f *fakeSnapshot) Import(key string) clusterset.Import { return f.imports[key] }
func (f *fakeSnapshot) Gateways() *clusterset.Gateways      { return clusterset.NewGateways(f.clusters) }

func (f *fakeSnapshot) Cluster(id federation.ClusterID) (*clusterset.ClusterInfo, bool) {
	i := slices.IndexFunc(f.clusters, func(c *clusterset.ClusterInfo) bool { return c.ID == id })
	if i < 0 {
		return nil, false
	}
	return f.clusters[i], true
}

func (f *fakeSnapshot) Services() []*clusterset.ServiceView {
	out := make([]*clusterset.ServiceView, 0, len(f.services))
	for _, v := range f.services {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *clusterset.ServiceView) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

func (f *fakeSnapshot) Service(key string) (*clusterset.ServiceView, bool) {
	v, ok := f.services[key]
	return v, ok
}
func (f *fakeSnapshot) Clusters() []*clusterset.ClusterInfo { return f.clusters }
func (f *fakeSnapshot) Workload(key string) (clusterset.TaggedWorkload, bool) {
	w, ok := f.workloads[key]
	return w, ok
}

func (f *fakeSnapshot) Workloads() []clusterset.TaggedWorkload {
	out := make([]clusterset.TaggedWorkload, 0, len(f.workloads))
	for _, w := range f.workloads {
		out = append(out, w)
	}
	return out
}

type pod struct {
	cluster federation.ClusterID
	network federation.NetworkID
	name    string
	ip      string
	ready   bool
}

// fleet builds a two-network clusterset: east (net-a) and west (net-b,
// with an HBONE gateway), echo exported from both.
func fleet(pods ...pod) *fakeSnapshot {
	f := &fakeSnapshot{
		clusters: []*clusterset.ClusterInfo{
			{ID: "east", Network: "net-a", TrustDomain: "cluster.local"},
			{ID: "west", Network: "net-b", TrustDomain: "cluster.local", Gateways: []*federationpb.Gateway{{
				Address: "192.0.2.10", Port: 15008, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE,
				Service: "istio-system/istio-eastwestgateway",
			}}},
		},
		services:  map[string]*clusterset.ServiceView{},
		workloads: map[string]clusterset.TaggedWorkload{},
	}
	parts := map[federation.ClusterID]*clusterset.ClusterService{}
	for _, c := range f.clusters {
		parts[c.ID] = &clusterset.ClusterService{Cluster: c.ID, Network: c.Network, Service: &federationpb.Service{
			Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local",
			ClusterIps: []string{map[federation.ClusterID]string{"east": "10.96.0.1", "west": "10.97.0.1"}[c.ID]},
			Type:       federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
			Ports:      []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, TargetPort: 9090}},
			Export:     &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT, Time: timestamppb.New(timestamppb.Now().AsTime().Truncate(1e9))},
		}}
	}
	for _, p := range pods {
		f.workloads[clusterset.WorkloadKey(p.cluster, "uid-"+p.name)] = clusterset.TaggedWorkload{Tag: &clusterset.Tag{Cluster: p.cluster, Network: p.network}, Workload: clusterset.NewWorkload(p.cluster, &federationpb.Workload{
			Uid: "uid-" + p.name, Namespace: "demo", Name: p.name, Ips: []string{p.ip}, ServiceAccount: "echo", Node: "node-1",
			Locality: &federationpb.Locality{Region: "r-" + string(p.cluster), Zone: "z1"}, Ready: p.ready, Ambient: true,
			CanonicalName: "echo", CanonicalRevision: "v1",
		})}
		parts[p.cluster].Endpoints = append(parts[p.cluster].Endpoints, clusterset.TagEndpoint(clusterset.NewTags(p.cluster, p.network), clusterset.NewEndpoint(&federationpb.Endpoint{
			Namespace: "demo", Service: "echo", Address: p.ip, Ready: p.ready,
			Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}},
			Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: p.name},
		})))
	}
	f.services["demo/echo"] = clusterset.MergeService([]clusterset.ClusterService{*parts["east"], *parts["west"]})
	return f
}

var defaultPods = []pod{
	{"east", "net-a", "echo-a", "10.1.0.1", true},
	{"east", "net-a", "echo-b", "10.1.0.2", false},
	{"west", "net-b", "echo-c", "10.2.0.1", true},
	{"west", "net-b", "echo-d", "10.2.0.2", true},
}

// view renders what a ztunnel on network sees, one resource per block.
func view(t *testing.T, items []Item, network federation.NetworkID) string {
	t.Helper()
	slices.SortFunc(items, func(a, b Item) int { return cmp.Compare(a.Name, b.Name) })
	var b strings.Builder
	for _, it := range items {
		if !it.Visible(network) {
			continue
		}
		js, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(it.Message)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("# " + it.Name + "\n" + string(js) + "\n")
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n%s", path, got)
	}
}

// protojson's output is not stable across runs (it adds random spaces);
// normalize it so goldens compare.
func normalize(s string) string { return strings.ReplaceAll(s, ":  ", ": ") }

func TestGolden(t *testing.T) {
	items := NewBuilder("cluster.local").Push(fleet(defaultPods...), nil, nil, true)
	for _, network := range []federation.NetworkID{"net-a", "net-b"} {
		t.Run(string(network), func(t *testing.T) {
			golden(t, "view-"+string(network), normalize(view(t, items, network)))
		})
	}
}

func TestMultiNetworkView(t *testing.T) {
	items := NewBuilder("cluster.local").Push(fleet(defaultPods...), nil, nil, true)
	byName := map[string]Item{}
	for _, it := range items {
		byName[it.Name] = it
	}
	split := "net-b/SplitHorizonWorkload/istio-system/istio-eastwestgateway/192.0.2.10/demo/echo.demo.svc.cluster.local"
	sw := byName[split].Message.(*workloadapi.Address).GetWorkload()
	if sw.GetCapacity().GetValue() != 2 || len(sw.GetAddresses()) != 0 || !byName[split].Visible("net-a") || byName[split].Visible("net-b") {
		t.Errorf("split-horizon workload %v: want capacity 2, no address, seen by net-a only", sw)
	}
	if it := byName["west/uid-echo-c"]; it.Visible("net-a") || !it.Visible("net-b") {
		t.Error("west's pod is visible outside its network")
	}
	if !byName["NetworkGateway/net-b/192.0.2.10/15008"].Visible("net-a") {
		t.Error("the gateway workload is not visible to other networks")
	}
	east := byName["east/uid-echo-b"].Message.(*workloadapi.Address).GetWorkload()
	if east.GetStatus() != workloadapi.WorkloadStatus_UNHEALTHY || east.GetNetworkGateway() != nil {
		t.Errorf("a not-ready pod on a network without gateway: %v", east)
	}
	west := byName["west/uid-echo-c"].Message.(*workloadapi.Address).GetWorkload()
	if west.GetNetworkGateway().GetHboneMtlsPort() != 15008 {
		t.Errorf("a pod on a network with a gateway has no network_gateway: %v", west)
	}
	// Only enum values every supported ztunnel knows.
	for _, it := range items {
		w := it.Message.(*workloadapi.Address).GetWorkload()
		if w == nil {
			continue
		}
		if w.GetTunnelProtocol() > workloadapi.TunnelProtocol_HBONE || w.GetWorkloadType() > workloadapi.WorkloadType_JOB ||
			w.GetStatus() > workloadapi.WorkloadStatus_UNHEALTHY {
			t.Errorf("%s uses an enum value older ztunnels reject", it.Name)
		}
	}
}

func TestIncremental(t *testing.T) {
	s := fleet(defaultPods...)
	b := NewBuilder("cluster.local")
	b.Push(s, nil, nil, true)

	// One pod changes: that workload alone (and the few derived resources).
	w := s.workloads["east/uid-echo-a"]
	w.Workload = clusterset.NewWorkload(w.Cluster, &federationpb.Workload{Uid: w.GetUid(), Namespace: "demo", Name: w.GetName(), Ips: w.GetIps(), Ready: false})
	s.workloads["east/uid-echo-a"] = w
	items := b.Push(s, nil, []string{"east/uid-echo-a"}, false)
	var names []string
	for _, it := range items {
		names = append(names, it.Name)
	}
	// The pod, and the split-horizon workloads of its service (east has no
	// gateway, so none of its own), nothing else.
	if !slices.Equal(names, []string{"east/uid-echo-a"}) {
		t.Errorf("one pod's change produced %v", names)
	}
	// A remote pod's readiness changes the capacity behind its gateway.
	w = s.workloads["west/uid-echo-c"]
	w.Workload = clusterset.NewWorkload(w.Cluster, &federationpb.Workload{Uid: w.GetUid(), Namespace: "demo", Name: w.GetName(), Ips: w.GetIps(), Ready: false})
	s.workloads["west/uid-echo-c"] = w
	items = b.Push(s, nil, []string{"west/uid-echo-c"}, false)
	var capacity uint32
	for _, it := range items {
		if strings.HasSuffix(it.Name, "/demo/echo.demo.svc.cluster.local") && strings.Contains(it.Name, "SplitHorizon") {
			capacity = it.Message.(*workloadapi.Address).GetWorkload().GetCapacity().GetValue()
		}
	}
	if len(items) != 3 || capacity != 1 {
		t.Errorf("a remote pod turning not ready produced %d items, capacity %d; want the pod and its two split-horizon workloads with capacity 1", len(items), capacity)
	}

	// A pod is deleted: a removal by its name.
	delete(s.workloads, "east/uid-echo-a")
	items = b.Push(s, nil, []string{"east/uid-echo-a"}, false)
	if len(items) == 0 || items[0].Name != "east/uid-echo-a" || items[0].Message != nil {
		t.Errorf("deleting a pod produced %v", items)
	}

	// The service goes: its name and its split-horizon workloads go.
	delete(s.services, "demo/echo")
	removed := map[string]bool{}
	for _, it := range b.Push(s, []string{"demo/echo"}, nil, false) {
		if it.Message == nil {
			removed[it.Name] = true
		}
	}
	if !removed["demo/echo.demo.svc.cluster.local"] || !removed["net-b/SplitHorizonWorkload/istio-system/istio-eastwestgateway/192.0.2.10/demo/echo.demo.svc.cluster.local"] {
		t.Errorf("removing the service removed %v", removed)
	}
}

// Every gateway is a workload: one that is not its network's tunnel
// comes and goes as the tunnel does.
func TestGatewayWorkloads(t *testing.T) {
	s := fleet(defaultPods...)
	b := NewBuilder("cluster.local")
	b.Push(s, nil, nil, true)
	const second = "NetworkGateway/net-b/192.0.2.11/15008"
	west := *s.clusters[1]
	west.Gateways = append(slices.Clone(west.Gateways), &federationpb.Gateway{
		Address: "192.0.2.11", Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, Service: "istio-system/istio-eastwestgateway",
	})
	s.clusters[1] = &west
	has := func(items []Item) (added, removed bool) {
		for _, it := range items {
			if it.Name == second {
				return it.Message != nil, it.Message == nil
			}
		}
		return false, false
	}
	if added, _ := has(b.Push(s, nil, nil, false)); !added {
		t.Errorf("a second gateway of net-b is no workload")
	}
	west.Gateways = west.Gateways[:1:1]
	if _, removed := has(b.Push(s, nil, nil, false)); !removed {
		t.Errorf("the second gateway's workload stays after it went")
	}
}

// TestEndpointsBeforeWorkload: a service's endpoints that arrive before
// their pod's workload are joined when the workload comes.
func TestEndpointsBeforeWorkload(t *testing.T) {
	s := fleet(defaultPods...)
	held := s.workloads["east/uid-echo-a"]
	delete(s.workloads, "east/uid-echo-a")
	b := NewBuilder("cluster.local")
	b.Push(s, nil, nil, true)
	s.workloads["east/uid-echo-a"] = held
	for _, it := range b.Push(s, nil, []string{"east/uid-echo-a"}, false) {
		if it.Name == "east/uid-echo-a" {
			if it.Message.(*workloadapi.Address).GetWorkload().GetServices()["demo/echo.demo.svc.cluster.local"] == nil {
				t.Error("the late workload does not list its service")
			}
			return
		}
	}
	t.Error("the late workload was not produced")
}

// An MCS import's clusterset hostname has the ClusterSetIPs as its VIPs,
// on every network (a ztunnel looks a VIP up on its own); the
// cluster-local hostname keeps each cluster's cluster IPs.
func TestClustersetIPs(t *testing.T) {
	f := fleet(defaultPods...)
	f.imports = map[string]clusterset.Import{"demo/echo": {ClustersetIPs: []netip.Addr{netip.MustParseAddr("240.242.0.5"), netip.MustParseAddr("fd6d:6673:6574::5")}}}
	items := NewBuilder("cluster.local").Push(f, nil, nil, true)
	addrs := func(name string) []string {
		for _, it := range items {
			if it.Name == name {
				var out []string
				for _, a := range it.Message.(*workloadapi.Address).GetService().GetAddresses() {
					ip, _ := netip.AddrFromSlice(a.GetAddress())
					out = append(out, a.GetNetwork()+"/"+ip.String())
				}
				return out
			}
		}
		t.Fatalf("no item %s", name)
		return nil
	}
	want := []string{"net-a/240.242.0.5", "net-a/fd6d:6673:6574::5", "net-b/240.242.0.5", "net-b/fd6d:6673:6574::5"}
	if got := addrs("demo/echo.demo.svc.clusterset.local"); !slices.Equal(got, want) {
		t.Errorf("clusterset hostname's addresses %v, want %v", got, want)
	}
	if got, want := addrs("demo/echo.demo.svc.cluster.local"), []string{"net-a/10.96.0.1", "net-b/10.97.0.1"}; !slices.Equal(got, want) {
		t.Errorf("cluster-local hostname's addresses %v, want %v", got, want)
	}
}
