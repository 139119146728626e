package imports

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
	"github.com/meshfed/meshfed/hub/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func service(name string, headless bool) *federationpb.Service {
	s := &federationpb.Service{
		Namespace: "demo", Name: name, Hostname: name + ".demo.svc.cluster.local",
		Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Ports:  []*federationpb.ServicePort{{Name: "http", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 80}},
		Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT, Time: timestamppb.New(time.Unix(1000, 0))},
	}
	if headless {
		s.Type = federationpb.ServiceType_SERVICE_TYPE_HEADLESS
	}
	return s
}

func endpoint(service, addr string) *federationpb.Endpoint {
	return &federationpb.Endpoint{
		Namespace: "demo", Service: service, Address: addr, Ready: true, Serving: true,
		Ports: []*federationpb.EndpointPort{{Name: "http", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
	}
}

type fixture struct {
	t          *testing.T
	reg        *registry.Registry
	east, west *registry.Conn
	version    map[*registry.Conn]uint64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	r := registry.New(registry.Config{})
	return &fixture{t: t, reg: r, east: r.Connect("east", ""), west: r.Connect("west", ""), version: map[*registry.Conn]uint64{}}
}

func (f *fixture) apply(c *registry.Conn, cl *federationpb.Cluster, services []*federationpb.Service, eps []*federationpb.Endpoint) {
	f.t.Helper()
	f.version[c]++
	if err := c.Apply("s", &federationpb.ShardUpdate{Version: f.version[c], Full: true, Cluster: cl, Services: services, Endpoints: eps}); err != nil {
		f.t.Fatal(err)
	}
}

var (
	eastCluster = &federationpb.Cluster{Id: "east", Network: "n1"}
	westCluster = &federationpb.Cluster{Id: "west", Network: "n2", Gateways: []*federationpb.Gateway{
		{Address: "192.0.2.10", Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS},
		{Address: "192.0.2.11", Port: 15008, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE},
	}}
)

func byKey(ims []*federationpb.Import) map[string]*federationpb.Import {
	out := map[string]*federationpb.Import{}
	for _, im := range ims {
		out[federation.ServiceKey(im.GetNamespace(), im.GetName())] = im
	}
	return out
}

func TestFeed(t *testing.T) {
	f := newFixture(t)
	f.apply(f.east, eastCluster, []*federationpb.Service{service("echo", false), service("db", true)},
		[]*federationpb.Endpoint{endpoint("echo", "10.1.0.1"), endpoint("db", "10.1.0.2")})
	labelled := service("web", false)
	labelled.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_LABEL
	f.apply(f.west, westCluster, []*federationpb.Service{service("echo", false), service("db", true), labelled},
		[]*federationpb.Endpoint{endpoint("echo", "10.2.0.1"), endpoint("db", "10.2.0.2")})

	serving := make(chan struct{})
	feed := NewFeed("east", syncproto.ImportsWanted{}, f.reg.Current, serving)
	if feed.Ready() != (<-chan struct{})(serving) || feed.Next(1<<20) != nil {
		t.Fatal("the feed sends before the hub serves")
	}
	close(serving)
	sets := feed.Next(1 << 20)
	if len(sets) != 1 || !sets[0].GetFull() || sets[0].GetVersion() != 1 {
		t.Fatalf("first sets %v, want one full set", sets)
	}
	got := byKey(sets[0].GetImports())
	if len(got) != 2 || got["demo/web"] != nil {
		t.Fatalf("imports %v, want echo and db (web is exported by label, not MCS)", slices.Collect(func(yield func(string) bool) {
			for k := range got {
				yield(k)
			}
		}))
	}
	echo := got["demo/echo"]
	if echo.GetType() != federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP || len(echo.GetIps()) != 1 || !slices.Equal(echo.GetClusters(), []string{"east", "west"}) {
		t.Errorf("echo: %v", echo)
	}
	// East reaches its own endpoint by address and west's through west's
	// TLS gateway, at the gateway's port.
	wantEcho := []*federationpb.ImportSource{
		{Cluster: "east", Network: "n1", Endpoints: []*federationpb.Endpoint{endpoint("echo", "10.1.0.1")}},
		{Cluster: "west", Network: "n2", ViaGateway: true, Endpoints: []*federationpb.Endpoint{{
			Address: "192.0.2.10", Ready: true, Serving: true, Network: "n2",
			Ports: []*federationpb.EndpointPort{{Name: "http", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 15443}},
		}}},
	}
	if diff := cmp.Diff(wantEcho, echo.GetSources(), protocmp.Transform()); diff != "" {
		t.Errorf("echo's sources (-want +got):\n%s", diff)
	}
	// What the spoke reads off each endpoint (federation.ViaGateway) is
	// what the hub sent it as.
	for _, src := range echo.GetSources() {
		for _, ep := range src.GetEndpoints() {
			if got := federation.ViaGateway(ep, sets[0].GetNetwork()); got != src.GetViaGateway() {
				t.Errorf("%s's endpoint %s: ViaGateway %v, sent as a gateway %v", src.GetCluster(), ep.GetAddress(), got, src.GetViaGateway())
			}
		}
	}
	// A headless import's clients dial pod addresses: west's are
	// unreachable from east's network, and a gateway is no stand-in.
	db := got["demo/db"]
	if db.GetType() != federationpb.ImportType_IMPORT_TYPE_HEADLESS || len(db.GetIps()) != 0 ||
		len(db.GetSources()) != 2 || len(db.GetSources()[1].GetEndpoints()) != 0 {
		t.Errorf("db: %v", db)
	}

	// Nothing changed: nothing to send.
	if sets := feed.Next(1 << 20); sets != nil {
		t.Fatalf("sets %v with nothing changed", sets)
	}
	// West stops exporting db: east's db loses west; then east stops too.
	ready := feed.Ready()
	f.apply(f.west, westCluster, []*federationpb.Service{service("echo", false)}, []*federationpb.Endpoint{endpoint("echo", "10.2.0.1")})
	select {
	case <-ready:
	default:
		t.Fatal("the feed is not ready after a change")
	}
	sets = feed.Next(1 << 20)
	if len(sets) != 1 || sets[0].GetFull() || len(sets[0].GetImports()) != 1 || !slices.Equal(sets[0].GetImports()[0].GetClusters(), []string{"east"}) {
		t.Fatalf("delta %v, want db exported by east only", sets)
	}
	f.apply(f.east, eastCluster, []*federationpb.Service{service("echo", false)}, []*federationpb.Endpoint{endpoint("echo", "10.1.0.1")})
	sets = feed.Next(1 << 20)
	if len(sets) != 1 || len(sets[0].GetImports()) != 0 || !slices.Equal(sets[0].GetRemoved(), []string{"demo/db"}) || sets[0].GetVersion() != 3 {
		t.Fatalf("delta %v, want db removed in set 3", sets)
	}
	// A gateway change resends every import.
	moved := proto.Clone(westCluster).(*federationpb.Cluster)
	moved.Gateways[0].Address = "192.0.2.20"
	f.apply(f.west, moved, []*federationpb.Service{service("echo", false)}, []*federationpb.Endpoint{endpoint("echo", "10.2.0.1")})
	sets = feed.Next(1 << 20)
	if len(sets) != 1 || len(sets[0].GetImports()) != 1 || sets[0].GetImports()[0].GetSources()[1].GetEndpoints()[0].GetAddress() != "192.0.2.20" {
		t.Fatalf("after the gateway moved: %v", sets)
	}
	// Other cluster facts (a member joins, exporting nothing) change no
	// import: nothing is resent.
	f.apply(f.reg.Connect("north", ""), &federationpb.Cluster{Id: "north", Network: "n3"}, nil, nil)
	if _, ok := f.reg.Current().Cluster("north"); !ok {
		t.Fatal("north did not join")
	}
	if sets := feed.Next(1 << 20); sets != nil {
		t.Fatalf("sets %v after a member joined without exports", sets)
	}
}

// A mesh feed (a spoke serving its cluster's istiod) sends every federated
// service, the MCS imports marked, and the workloads behind the endpoints.
// TestFeedGatewaysOnlyForMeshTLS: an east-west gateway forwards only
// Istio mTLS, so a network whose endpoints all take plaintext lists no
// gateway in the import; once one takes mTLS, the gateway stands for it.
func TestFeedGatewaysOnlyForMeshTLS(t *testing.T) {
	f := newFixture(t)
	f.apply(f.east, eastCluster, []*federationpb.Service{service("echo", false)}, []*federationpb.Endpoint{endpoint("echo", "10.1.0.1")})
	plain := endpoint("echo", "10.2.0.1")
	plain.Plaintext = true
	f.apply(f.west, westCluster, []*federationpb.Service{service("echo", false)}, []*federationpb.Endpoint{plain})
	serving := make(chan struct{})
	close(serving)
	west := func() *federationpb.ImportSource {
		t.Helper()
		sets := NewFeed("east", syncproto.ImportsWanted{}, f.reg.Current, serving).Next(1 << 20)
		for _, src := range byKey(sets[0].GetImports())["demo/echo"].GetSources() {
			if src.GetCluster() == "west" {
				return src
			}
		}
		t.Fatal("no source west")
		return nil
	}
	if src := west(); len(src.GetEndpoints()) != 0 || src.GetViaGateway() {
		t.Errorf("west's plaintext endpoint: source %v, want no gateway", src)
	}
	mtls := endpoint("echo", "10.2.0.2")
	f.apply(f.west, westCluster, []*federationpb.Service{service("echo", false)}, []*federationpb.Endpoint{plain, mtls})
	if src := west(); len(src.GetEndpoints()) != 1 || !src.GetViaGateway() || src.GetEndpoints()[0].GetAddress() != "192.0.2.10" {
		t.Errorf("west with an mTLS endpoint: source %v, want its gateway", src)
	}
}

func TestMeshFeed(t *testing.T) {
	f := newFixture(t)
	labelled := service("web", false)
	labelled.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_LABEL
	ep := endpoint("web", "10.1.0.5")
	ep.Workload = &federationpb.WorkloadRef{Kind: "Pod", Name: "web-0", Uid: "uid-web-0"}
	f.version[f.east]++
	if err := f.east.Apply("s", &federationpb.ShardUpdate{
		Version: f.version[f.east], Full: true, Cluster: eastCluster,
		Services: []*federationpb.Service{service("echo", false), labelled}, Endpoints: []*federationpb.Endpoint{ep},
		Workloads: []*federationpb.Workload{{Uid: "uid-web-0", Namespace: "demo", Name: "web-0", Ips: []string{"10.1.0.5"}, ServiceAccount: "web", CanonicalName: "web"}},
	}); err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	close(serving)
	sets := NewFeed("east", syncproto.ImportsWanted{Mesh: true}, f.reg.Current, serving).Next(1 << 20)
	got := byKey(sets[0].GetImports())
	if len(got) != 2 || !got["demo/echo"].GetMcs() || got["demo/web"].GetMcs() {
		t.Fatalf("imports %v, want echo (MCS) and web (not)", sets[0].GetImports())
	}
	if w := got["demo/web"].GetSources()[0].GetWorkloads(); len(w) != 1 || w[0].GetServiceAccount() != "web" {
		t.Errorf("web's workloads %v", w)
	}
}

// A feed to a spoke that serves remote views adds each source as its own
// cluster has it (every endpoint as it is, behind a gateway or not, with
// its workload; the ClusterIPs and ports) and the members' clusters, in
// the full set and again only when they change.
func TestRemoteViewsFeed(t *testing.T) {
	f := newFixture(t)
	f.apply(f.east, eastCluster, nil, nil)
	svc := service("echo", false)
	svc.ClusterIps = []string{"10.0.0.200"}
	svc.Ports[0].TargetPort = 8080
	ep := endpoint("echo", "10.2.0.1")
	ep.Workload = &federationpb.WorkloadRef{Kind: "Pod", Name: "echo-0", Uid: "uid-echo-0"}
	f.version[f.west]++
	if err := f.west.Apply("s", &federationpb.ShardUpdate{
		Version: f.version[f.west], Full: true, Cluster: westCluster, Services: []*federationpb.Service{svc}, Endpoints: []*federationpb.Endpoint{ep},
		Workloads: []*federationpb.Workload{{Uid: "uid-echo-0", Namespace: "demo", Name: "echo-0", Ips: []string{"10.2.0.1"}, ServiceAccount: "echo", Ambient: true}},
	}); err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	close(serving)
	feed := NewFeed("east", syncproto.ImportsWanted{Mesh: true, RemoteViews: true}, f.reg.Current, serving)
	sets := feed.Next(1 << 20)
	if len(sets) != 1 {
		t.Fatalf("%d sets", len(sets))
	}
	var ids []string
	for _, c := range sets[0].GetClusters() {
		ids = append(ids, c.GetId()+"/"+c.GetNetwork()+fmt.Sprint(len(c.GetGateways())))
	}
	if !slices.Equal(ids, []string{"east/n10", "west/n22"}) {
		t.Errorf("clusters %v, want east and west with their networks and gateways", ids)
	}
	src := byKey(sets[0].GetImports())["demo/echo"].GetSources()[0]
	if eps := src.GetEndpoints(); len(eps) != 1 || eps[0].GetAddress() != "192.0.2.10" {
		t.Errorf("reachable endpoints %v, want west's mTLS gateway", eps)
	}
	if eps := src.GetClusterEndpoints(); len(eps) != 1 || eps[0].GetAddress() != "10.2.0.1" || eps[0].GetWorkload().GetUid() != "uid-echo-0" {
		t.Errorf("the cluster's endpoints %v, want the pod as it is", eps)
	}
	if w := src.GetWorkloads(); len(w) != 1 || !w[0].GetAmbient() {
		t.Errorf("workloads %v, want the pod behind the gateway", w)
	}
	if !slices.Equal(src.GetClusterIps(), []string{"10.0.0.200"}) || src.GetClusterPorts()[0].GetTargetPort() != 8080 {
		t.Errorf("the cluster's service: IPs %v ports %v", src.GetClusterIps(), src.GetClusterPorts())
	}

	// A change of services alone does not resend the clusters; one of a
	// cluster does.
	svc = proto.Clone(svc).(*federationpb.Service) // the registry keeps what it was given
	svc.Ports[0].TargetPort = 9090
	f.apply(f.west, westCluster, []*federationpb.Service{svc}, []*federationpb.Endpoint{ep})
	if sets := feed.Next(1 << 20); len(sets) != 1 || len(sets[0].GetClusters()) != 0 || len(sets[0].GetImports()) != 1 {
		t.Errorf("after a service change: %v", sets)
	}
	moved := proto.Clone(westCluster).(*federationpb.Cluster)
	moved.Gateways[1].Address = "192.0.2.12"
	f.apply(f.west, moved, []*federationpb.Service{svc}, []*federationpb.Endpoint{ep})
	sets = feed.Next(1 << 20)
	if len(sets) != 1 || len(sets[0].GetClusters()) != 2 || sets[0].GetClusters()[1].GetGateways()[1].GetAddress() != "192.0.2.12" {
		t.Errorf("after west's HBONE gateway moved: %v", sets)
	}
}

// A cluster's network is known only from its shard: until then the feed
// waits, and wakes on the next snapshot.
func TestFeedWaitsForTheReceiversShard(t *testing.T) {
	f := newFixture(t)
	f.apply(f.west, westCluster, []*federationpb.Service{service("echo", false)}, nil)
	serving := make(chan struct{})
	close(serving)
	feed := NewFeed("east", syncproto.ImportsWanted{}, f.reg.Current, serving)
	if sets := feed.Next(1 << 20); sets != nil {
		t.Fatalf("sets %v before east's shard", sets)
	}
	ready := feed.Ready()
	f.apply(f.east, eastCluster, nil, nil)
	<-ready
	if sets := feed.Next(1 << 20); len(sets) != 1 || !sets[0].GetFull() || len(sets[0].GetImports()) != 1 {
		t.Fatalf("sets %v, want the full set", sets)
	}
}

// Chunks stay under the bound, and joining them as a spoke does gives the
// imports back whole: every field of every source (its network, what a
// remote view needs, the workloads), not only the endpoints.
func TestChunkSplitsLargeImports(t *testing.T) {
	big := &federationpb.Import{Namespace: "demo", Name: "big", Type: federationpb.ImportType_IMPORT_TYPE_HEADLESS, Clusters: []string{"east", "west"}}
	for _, c := range []string{"east", "west"} {
		src := &federationpb.ImportSource{
			Cluster: c, Network: "net-" + c, ClusterIps: []string{"10.0.0.1"},
			ClusterPorts: []*federationpb.ServicePort{{Name: "http", Port: 80, TargetPort: 8080}},
		}
		for i := range 3000 {
			addr := fmt.Sprintf("10.%d.%d.%d", len(c), i/256, i%256)
			src.Endpoints = append(src.Endpoints, endpoint("big", addr))
			src.ClusterEndpoints = append(src.ClusterEndpoints, endpoint("big", addr))
			src.Workloads = append(src.Workloads, &federationpb.Workload{Uid: "uid-" + addr, Namespace: "demo", Name: "big-" + addr, Ips: []string{addr}, ServiceAccount: "big"})
		}
		big.Sources = append(big.Sources, src)
	}
	small := []*federationpb.Import{{Namespace: "demo", Name: "a"}, {Namespace: "demo", Name: "b"}}
	want := append([]*federationpb.Import{proto.Clone(big).(*federationpb.Import)}, small...)
	const maxBytes = 64 << 10
	chunks := Chunk(7, true, append([]*federationpb.Import{big}, small...), nil, maxBytes)
	if len(chunks) < 3 {
		t.Fatalf("%d chunks for %d bytes", len(chunks), proto.Size(big))
	}
	joined := map[string]*federationpb.Import{}
	var order []string
	for i, c := range chunks {
		if n := proto.Size(c); n > maxBytes {
			t.Errorf("chunk %d is %d bytes", i, n)
		}
		if c.GetVersion() != 7 || !c.GetFull() || c.GetMore() != (i < len(chunks)-1) {
			t.Errorf("chunk %d: version %d full %v more %v", i, c.GetVersion(), c.GetFull(), c.GetMore())
		}
		for _, part := range c.GetImports() {
			k := federation.ServiceKey(part.GetNamespace(), part.GetName())
			whole, ok := joined[k]
			if !ok {
				joined[k] = part
				order = append(order, k)
				continue
			}
			for _, src := range part.GetSources() {
				if i := slices.IndexFunc(whole.Sources, func(s *federationpb.ImportSource) bool { return s.GetCluster() == src.GetCluster() }); i >= 0 {
					w := whole.Sources[i]
					w.Endpoints = append(w.Endpoints, src.GetEndpoints()...)
					w.ClusterEndpoints = append(w.ClusterEndpoints, src.GetClusterEndpoints()...)
					w.Workloads = append(w.Workloads, src.GetWorkloads()...)
				} else {
					whole.Sources = append(whole.Sources, src)
				}
			}
		}
	}
	var got []*federationpb.Import
	for _, k := range order {
		got = append(got, joined[k])
	}
	// proto.Equal: cmp with protocmp takes seconds over 6,000 endpoints.
	if !slices.EqualFunc(want, got, func(a, b *federationpb.Import) bool { return proto.Equal(a, b) }) {
		t.Errorf("joined chunks differ from the imports: %d imports, first %s", len(got), got[0].GetName())
	}
}

// BenchmarkFeedFullSet measures what one importing spoke's first set
// costs the hub: 5,000 imports exported by three clusters with ten
// endpoints each, built and chunked for a cluster on its own network (a
// third of the endpoints are another network's, sent as its gateway).
func BenchmarkFeedFullSet(b *testing.B) {
	const imports, perCluster = 5000, 10
	r := registry.New(registry.Config{})
	clusters := []*federationpb.Cluster{eastCluster, {Id: "north", Network: "n1"}, westCluster}
	for ci, cl := range clusters {
		var services []*federationpb.Service
		var eps []*federationpb.Endpoint
		for i := range imports {
			name := fmt.Sprintf("svc-%d", i)
			services = append(services, service(name, false))
			for j := range perCluster {
				eps = append(eps, endpoint(name, fmt.Sprintf("10.%d.%d.%d", ci, i/256*perCluster/256+j, i%256)))
			}
		}
		if err := r.Connect(federation.ClusterID(cl.GetId()), "").Apply("s", &federationpb.ShardUpdate{Version: 1, Full: true, Cluster: cl, Services: services, Endpoints: eps}); err != nil {
			b.Fatal(err)
		}
	}
	serving := make(chan struct{})
	close(serving)
	b.ReportAllocs()
	bytes := 0
	for b.Loop() {
		bytes = 0
		for _, c := range NewFeed("east", syncproto.ImportsWanted{}, r.Current, serving).Next(4 << 20) {
			bytes += proto.Size(c)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/imports, "ns/import")
	b.ReportMetric(float64(bytes)/imports, "wire-B/import")
}
