//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"istio.io/istio/pkg/workloadapi"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/xds"
)

// The workload API benchmark's clusterset: 10 clusters each exporting the
// same 500 services with 20 pods each, every pod a workload referenced by
// an endpoint of its service: 100,000 workloads, 200 per merged service.
// Clusters 0–4 are on net-a, 5–9 on net-b; each network has one HBONE
// east-west gateway (in its first cluster). 500 ztunnels, 250 per network.
const (
	zbClusters  = 10
	zbServices  = 500 // per cluster; the same names everywhere, so they merge
	zbPods      = 20  // per service and cluster
	zbClients   = 500 // split evenly over the networks
	zbChanges   = 20  // per iteration, unless they take longer than zbChangeBudget
	zbNamespace = "bench"
	zbHBONE     = 15008
	zbGateway   = "istio-system/istio-eastwestgateway"

	// -short: 10,000 workloads, 50 clients, 5 changes.
	zbServicesShort = 50
	zbClientsShort  = 50
	zbChangesShort  = 5

	// zbChangeBudget bounds the time spent on changes in each phase (at
	// least one change is made): at 500 clients one change takes seconds,
	// more on a loaded machine (BENCHMARKS.md), and the run must stay within
	// a few minutes. When changes are cheap, all zbChanges are made.
	zbChangeBudget = 20 * time.Second

	// zbMaxMessageBytes is what ztunnel accepts (its ADS client's
	// max_decoding_message_size is 200 MiB), as the hub does by default; the
	// clients need it too, above gRPC's 4 MiB receive default.
	zbMaxMessageBytes = 200 << 20
)

var zbNetworks = [...]string{"net-a", "net-b"}

// zbSize is one run's clusterset and client count.
type zbSize struct {
	services, clients, changes int
}

// addresses is the number of Address resources a ztunnel of one network
// holds: every service under its two hostnames (cluster-local and
// clusterset, since it is exported through MCS), both gateways, the
// workloads of its own network, and the other network's split-horizon
// workload of every service under both hostnames.
func (z zbSize) addresses() int {
	perNetwork := zbClusters / len(zbNetworks)
	return 2*z.services + len(zbNetworks) + perNetwork*z.services*zbPods + (len(zbNetworks)-1)*2*z.services
}

func zbNetworkOf(cluster int) int { return cluster * len(zbNetworks) / zbClusters }

func zbGatewayAddress(network int) string { return fmt.Sprintf("172.16.0.%d", network+1) }

func zbServiceName(s int) string { return fmt.Sprintf("svc-%03d", s) }

func zbHost(s int) string { return zbServiceName(s) + "." + zbNamespace + ".svc.cluster.local" }

func zbPodName(s, p int) string { return fmt.Sprintf("%s-%02d", zbServiceName(s), p) }

func zbPodIP(pod zbPod) string {
	i := pod.s*zbPods + pod.p + 1
	return fmt.Sprintf("10.%d.%d.%d", pod.c, i>>8, i&255)
}

// zbWorkloadKey is the pod's Address name: cluster/uid.
func zbWorkloadKey(pod zbPod) string {
	return clusterset.WorkloadKey(federation.ClusterID(fanoutClusterID(pod.c)), "uid-"+zbPodName(pod.s, pod.p))
}

// zbSplitName is the name the workload builder gives the split-horizon
// workload of a service behind a network's gateway (checked at setup).
func zbSplitName(network, s int) string {
	return fmt.Sprintf("%s/SplitHorizonWorkload/istio-system/istio-eastwestgateway/%s/%s/%s",
		zbNetworks[network], zbGatewayAddress(network), zbNamespace, zbHost(s))
}

func zbLocality(c int) *federationpb.Locality {
	return &federationpb.Locality{Region: fmt.Sprintf("r%d", c/2), Zone: fmt.Sprintf("z%d", c)}
}

// zbEndpoint is a pod's endpoint in its service.
func zbEndpoint(pod zbPod, ready bool) *federationpb.Endpoint {
	return &federationpb.Endpoint{
		Namespace: zbNamespace, Service: zbServiceName(pod.s), Address: zbPodIP(pod),
		Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
		Ready:    ready,
		Serving:  ready,
		Node:     fmt.Sprintf("node-%02d", pod.p),
		Locality: zbLocality(pod.c),
		Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: zbPodName(pod.s, pod.p)},
	}
}

// zbWorkload is a pod's workload: ambient, with its service's account.
func zbWorkload(pod zbPod, ready bool) *federationpb.Workload {
	name, svc := zbPodName(pod.s, pod.p), zbServiceName(pod.s)
	return &federationpb.Workload{
		Uid: "uid-" + name, Namespace: zbNamespace, Name: name, Ips: []string{zbPodIP(pod)},
		ServiceAccount: svc, Node: fmt.Sprintf("node-%02d", pod.p), Locality: zbLocality(pod.c),
		App: svc, Version: "v1", CanonicalName: svc, CanonicalRevision: "v1",
		Ready: ready, Ambient: true,
	}
}

// zbRegistry connects the clusters and applies their full shards.
func zbRegistry(b *testing.B, reg *registry.Registry, size zbSize) []*registry.Conn {
	b.Helper()
	conns := make([]*registry.Conn, zbClusters)
	for c := range zbClusters {
		n := zbNetworkOf(c)
		cluster := testCluster(fanoutClusterID(c), zbNetworks[n])
		if c == n*zbClusters/len(zbNetworks) { // the network's first cluster
			cluster.Gateways = []*federationpb.Gateway{{
				Address: zbGatewayAddress(n), Port: zbHBONE, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE, Service: zbGateway,
			}}
		}
		u := &federationpb.ShardUpdate{Version: 1, Full: true, Cluster: cluster}
		for s := range size.services {
			svc := testService(zbNamespace, zbServiceName(s))
			svc.ClusterIps = []string{fmt.Sprintf("10.%d.%d.%d", 96+c, s>>8, s&255)}
			u.Services = append(u.Services, svc)
			for p := range zbPods {
				u.Endpoints = append(u.Endpoints, zbEndpoint(zbPod{c, s, p}, true))
				u.Workloads = append(u.Workloads, zbWorkload(zbPod{c, s, p}, true))
			}
		}
		conns[c] = reg.Connect(federation.ClusterID(fanoutClusterID(c)), "bench")
		if err := conns[c].Apply("bench", u); err != nil {
			b.Fatal(err)
		}
	}
	if s := reg.Current(); s.ServiceCount() != size.services || s.WorkloadCount() != zbClusters*size.services*zbPods {
		b.Fatalf("registry has %d services and %d workloads, want %d and %d",
			s.ServiceCount(), s.WorkloadCount(), size.services, zbClusters*size.services*zbPods)
	}
	return conns
}

// BenchmarkWorkloadAPI measures the workload API: 100,000
// workloads in 10 clusters on 2 networks, served to 500 ztunnel-like delta
// clients over loopback gRPC. It reports the initial sync of one ztunnel
// connected alone and of all 500, the heap, and per pod readiness change
// (one registry delta flipping a pod's workload and endpoint): the latency
// from the apply to the last client and over all clients, bytes, encodes
// and CPU, first with the one ztunnel (metrics suffixed -1zt), then with
// all 500.
func BenchmarkWorkloadAPI(b *testing.B) {
	size := zbSize{services: zbServices, clients: zbClients, changes: zbChanges}
	if testing.Short() {
		size = zbSize{services: zbServicesShort, clients: zbClientsShort, changes: zbChangesShort}
	}
	ctx, cancel := context.WithCancel(b.Context())
	g, ctx := errgroup.WithContext(ctx)
	z := &zbBench{
		size: size, st: &zbState{progress: newProgress()}, metrics: prometheus.NewRegistry(),
		notReady: map[zbPod]bool{}, report: map[string]float64{},
	}
	b.Cleanup(func() {
		cancel()
		err := g.Wait()
		for _, c := range z.conns {
			_ = c.Close()
		}
		if err != nil {
			b.Errorf("workload API: %v", err)
		}
		z.checkHandlers(b)
	})

	start := time.Now()
	reg := registry.New(registry.Config{})
	z.shards = zbRegistry(b, reg, size)
	z.versions = make([]uint64, zbClusters)
	for c := range z.versions {
		z.versions[c] = 1
	}
	checkZtunnelDecoder(b)
	b.Logf("registry: %d services, %d workloads in %v", size.services, reg.Current().WorkloadCount(), time.Since(start).Round(time.Millisecond))

	cfg := xds.Config{Addr: "127.0.0.1:0", PushInterval: hub.DefaultConfig().XDSPushInterval, MaxMessageBytes: zbMaxMessageBytes, WorkloadAPI: true}
	srv, err := xds.New(cfg, z.metrics, testLogger(b))
	if err != nil {
		b.Fatal(err)
	}
	z.srv = srv
	runAt := time.Now()
	g.Go(func() error { return srv.Run(ctx, serveFrom(reg)) })
	z.warmUp(ctx, b)
	z.report["serve-ms"] = ms(time.Since(runAt))

	z.syncFirst(ctx, b, g)
	var one zbRun
	one.begin(b, z)
	for range size.changes {
		z.change(ctx, b, &one, 1)
		if one.elapsed() > zbChangeBudget {
			break
		}
	}
	maps.Copy(z.report, one.end(ctx, b, z, "-1zt"))

	z.syncAll(ctx, b, g)
	var all zbRun
	b.ReportAllocs()
	all.begin(b, z)
	for b.Loop() {
		for range size.changes {
			z.change(ctx, b, &all, size.clients)
			if all.elapsed() > zbChangeBudget {
				break
			}
		}
	}
	maps.Copy(z.report, all.end(ctx, b, z, ""))
	// b.Loop drops the metrics reported before it.
	for unit, v := range z.report {
		b.ReportMetric(v, unit)
	}
}

// zbBench is the benchmark's clusterset, server and clients.
type zbBench struct {
	size     zbSize
	shards   []*registry.Conn
	versions []uint64 // shard versions, by cluster
	srv      *xds.Server
	metrics  *prometheus.Registry
	st       *zbState
	clients  []*zbClient
	conns    []*grpc.ClientConn
	changes  int                // made so far
	notReady map[zbPod]bool     // pods the changes made not ready
	report   map[string]float64 // by unit
}

func (z *zbBench) dial(b *testing.B, h stats.Handler) *grpc.ClientConn {
	b.Helper()
	conn, err := grpc.NewClient(z.srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(h), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(zbMaxMessageBytes)))
	if err != nil {
		b.Fatal(err)
	}
	z.conns = append(z.conns, conn)
	return conn
}

// warmUp waits for the server to serve (it pushes the whole registry
// before), with a stream that asks only for authorizations.
func (z *zbBench) warmUp(ctx context.Context, b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn := z.dial(b, &bench.WireBytes{})
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: zbNode("warm-up", 0, 0), TypeUrl: xds.AuthorizationType}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
}

// checkHandlers checks, once the server has stopped, that no stream is
// left: Run returns only after the stream handlers have (WaitForHandlers).
func (z *zbBench) checkHandlers(b *testing.B) {
	b.Helper()
	if z.srv != nil && len(z.srv.Proxies()) > 0 {
		b.Errorf("%d streams still open after the server stopped", len(z.srv.Proxies()))
	}
}

func zbNode(id string, network, cluster int) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{
		xds.MetadataClusterID: fanoutClusterID(cluster), xds.MetadataNetwork: zbNetworks[network], "NODE_NAME": id,
	})
	return &core.Node{Id: "ztunnel~10.255.0.1~" + id + ".istio-system~istio-system.svc.cluster.local", Metadata: md}
}

func (z *zbBench) connect(ctx context.Context, b *testing.B, g *errgroup.Group, c *zbClient) {
	b.Helper()
	c.conn = z.dial(b, &c.bytes)
	g.Go(func() error { return c.run(ctx, z.st) })
}

func (z *zbBench) awaitSynced(ctx context.Context, b *testing.B, what string, n int64, timeout time.Duration) {
	b.Helper()
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := z.st.await(wait, func() bool { return z.st.ready.Load() >= n }); err != nil {
		b.Fatalf("waiting for %s (%d of %d synced): %v", what, z.st.ready.Load(), n, err)
	}
}

// syncFirst connects the first ztunnel alone and reports its initial sync.
func (z *zbBench) syncFirst(ctx context.Context, b *testing.B, g *errgroup.Group) {
	b.Helper()
	want := z.size.addresses()
	perNetwork := zbClusters / len(zbNetworks)
	for i := range z.size.clients {
		network := i % len(zbNetworks)
		cluster := network*perNetwork + (i/len(zbNetworks))%perNetwork
		z.clients = append(z.clients, &zbClient{index: i, network: network, want: want, node: zbNode(fmt.Sprintf("ztunnel-%03d", i), network, cluster)})
	}
	z.st.synced = make([]time.Time, z.size.clients)
	z.report["heap-before-MiB"] = mib(heapInUse())
	first := z.clients[0]
	t0 := time.Now()
	z.connect(ctx, b, g, first)
	z.awaitSynced(ctx, b, "the first ztunnel's initial sync", 1, 60*time.Second)
	z.report["sync1-ms"] = ms(z.st.synced[0].Sub(t0))
	z.report["sync1-bytes"] = float64(first.bytes.Load())
	z.report["sync1-resources"] = float64(first.initial)
	served := z.srv.Resources(xds.AddressType, zbNetworks[0])
	if got := len(served); got != want {
		b.Fatalf("the hub's %s set has %d addresses, want %d", zbNetworks[0], got, want)
	}
	for _, name := range []string{zbSplitName(1, 0), zbWorkloadKey(zbPod{})} {
		if served[name] == "" {
			b.Fatalf("the hub's %s set has no %s", zbNetworks[0], name)
		}
	}
	z.report["heap-1zt-MiB"] = mib(heapInUse())
}

// syncAll connects the other ztunnels at once and reports when the last
// has its initial state, and the heap they cost.
func (z *zbBench) syncAll(ctx context.Context, b *testing.B, g *errgroup.Group) {
	b.Helper()
	heap1 := heapInUse()
	t1 := time.Now()
	for _, c := range z.clients[1:] {
		z.connect(ctx, b, g, c)
	}
	z.awaitSynced(ctx, b, "every ztunnel's initial sync", int64(z.size.clients), 240*time.Second)
	times := make([]time.Duration, 0, z.size.clients-1)
	for _, t := range z.st.synced[1:] {
		times = append(times, t.Sub(t1))
	}
	slices.Sort(times)
	z.report["syncall-ms"] = ms(times[len(times)-1])
	z.report["syncall-p50-ms"] = ms(times[(len(times)-1)/2])
	heap2 := heapInUse()
	z.report["heap-synced-MiB"] = mib(heap2)
	z.report["heap-KiB/zt"] = float64(heap2-heap1) / float64(z.size.clients-1) / (1 << 10)
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		z.report["maxrss-MiB"] = float64(ru.Maxrss) / (1 << 10) // Linux: KiB
	}
}

// heapInUse is the live heap. Two collections: pooled buffers (gRPC's
// message buffers are pooled) survive the first.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// zbRun accumulates the figures of a series of changes.
type zbRun struct {
	start               time.Time
	changes             int
	latencies, lasts    []time.Duration
	ms0                 runtime.MemStats
	bytes0, resp0, enc0 int64
	pushes0             uint64
	pushTime0           float64
	cpu0                time.Duration
}

func (r *zbRun) begin(b *testing.B, z *zbBench) {
	b.Helper()
	runtime.GC()
	runtime.ReadMemStats(&r.ms0)
	r.bytes0, r.resp0, r.enc0 = z.bytes(), z.st.responses.Load(), encodesOf(b, z.metrics)
	r.pushes0, r.pushTime0 = pushSeconds(b, z.metrics)
	r.cpu0 = cpuTime(b)
	r.start = time.Now()
}

func (r *zbRun) elapsed() time.Duration { return time.Since(r.start) }

// end returns the per-change figures, by unit with a suffix.
func (r *zbRun) end(ctx context.Context, b *testing.B, z *zbBench, suffix string) map[string]float64 {
	b.Helper()
	// The last client may have its response before the push has handed
	// the change to every view: let the push finish.
	awaitPushes(ctx, b, z.metrics, r.pushes0+uint64(r.changes))
	cpu := cpuTime(b) - r.cpu0
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	n := float64(r.changes)
	slices.Sort(r.latencies)
	var sum time.Duration
	for _, l := range r.lasts {
		sum += l
	}
	out := map[string]float64{
		"changes":          n,
		"last-ms":          ms(sum) / n,
		"last-max-ms":      ms(slices.Max(r.lasts)),
		"p50-ms":           ms(r.latencies[(len(r.latencies)-1)*50/100]),
		"p99-ms":           ms(r.latencies[(len(r.latencies)*99+99)/100-1]),
		"cpu-ms/change":    ms(cpu) / n,
		"allocs/change":    float64(ms1.Mallocs-r.ms0.Mallocs) / n,
		"encodes/change":   float64(encodesOf(b, z.metrics)-r.enc0) / n,
		"bytes/change":     float64(z.bytes()-r.bytes0) / n,
		"responses/change": float64(z.st.responses.Load()-r.resp0) / n,
	}
	if pushes, pushTime := pushSeconds(b, z.metrics); pushes > r.pushes0 {
		out["push-ms"] = (pushTime - r.pushTime0) / float64(pushes-r.pushes0) * 1000
	}
	suffixed := make(map[string]float64, len(out))
	for unit, v := range out {
		if base, per, ok := strings.Cut(unit, "/"); ok {
			suffixed[base+suffix+"/"+per] = v
		} else {
			suffixed[unit+suffix] = v
		}
	}
	return suffixed
}

// bytes is what every client has received so far, on the wire.
func (z *zbBench) bytes() int64 {
	var n int64
	for _, c := range z.clients {
		n += c.bytes.Load()
	}
	return n
}

// zbPod is a pod: cluster, service, index.
type zbPod struct{ c, s, p int }

// podFor is the pod of the k-th change: consecutive changes touch
// different clusters, services and pods.
func (z *zbBench) podFor(k int) zbPod {
	return zbPod{c: k % zbClusters, s: (k * 53) % z.size.services, p: (k / zbClusters) % zbPods}
}

// change makes the next change: one pod becomes not ready (or ready
// again), its workload and its endpoint in one registry delta, as a spoke
// sends it. The first clients (those connected) must all see it: those of
// the pod's network receive the workload with its new status, the others
// the split-horizon workload of its service with the new capacity. It
// records every client's latency from the start of the registry's apply.
func (z *zbBench) change(ctx context.Context, b *testing.B, r *zbRun, clients int) {
	b.Helper()
	pod := z.podFor(z.changes)
	z.changes++
	r.changes++
	ready := z.notReady[pod]
	z.notReady[pod] = !ready
	network := zbNetworkOf(pod.c)
	capacity := uint64(zbClusters / len(zbNetworks) * zbPods)
	for q, down := range z.notReady {
		if down && q.s == pod.s && zbNetworkOf(q.c) == network {
			capacity--
		}
	}
	status := uint64(workloadapi.WorkloadStatus_HEALTHY)
	if !ready {
		status = uint64(workloadapi.WorkloadStatus_UNHEALTHY)
	}
	probe := &zbProbe{id: z.changes, received: make([]time.Time, clients), done: make(chan struct{})}
	for n := range zbNetworks {
		if n == network {
			probe.want[n] = zbExpect{name: zbWorkloadKey(pod), field: zbStatusField, value: status}
		} else {
			probe.want[n] = zbExpect{name: zbSplitName(network, pod.s), field: zbCapacityField, value: capacity}
		}
	}
	probe.remaining.Store(int64(clients))
	want := z.st.responses.Load() + int64(clients) // one Address response each
	z.st.probe.Store(probe)

	z.versions[pod.c]++
	update := &federationpb.ShardUpdate{
		Version:   z.versions[pod.c],
		Workloads: []*federationpb.Workload{zbWorkload(pod, ready)},
		Endpoints: []*federationpb.Endpoint{zbEndpoint(pod, ready)},
	}
	applied := time.Now()
	if err := z.shards[pod.c].Apply("bench", update); err != nil {
		b.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := z.st.await(wait, func() bool { return isClosed(probe.done) && z.st.responses.Load() >= want }); err != nil {
		b.Fatalf("change %d (pod %s ready=%v): %d of %d clients saw it; %d responses, want %d: %v",
			z.changes, zbWorkloadKey(pod), ready, int64(clients)-probe.remaining.Load(), clients, z.st.responses.Load(), want, err)
	}
	z.st.probe.Store(nil)
	var last time.Duration
	for _, t := range probe.received {
		l := max(t.Sub(applied), 0)
		r.latencies = append(r.latencies, l)
		last = max(last, l)
	}
	r.lasts = append(r.lasts, last)
}

// zbState is what the clients share with the benchmark.
type zbState struct {
	probe     atomic.Pointer[zbProbe]
	ready     atomic.Int64 // clients that have ACKed their complete initial state
	synced    []time.Time  // by client: when it ACKed it, each written by its client only
	responses atomic.Int64 // Address responses received after the initial sync
	progress
}

// zbProbe is the change in flight: each client records when a response
// first shows it.
type zbProbe struct {
	id        int
	want      [len(zbNetworks)]zbExpect // by the client's network
	received  []time.Time               // by client, each written by its client only
	remaining atomic.Int64
	done      chan struct{} // closed when remaining reaches 0
}

// zbExpect is a resource and the value one field of its workload must have.
type zbExpect struct {
	name  string
	field protowire.Number
	value uint64
}

// Fields of istio.workload.Workload the clients read, and of Address.
const (
	zbAddressWorkload protowire.Number = 1
	zbStatusField     protowire.Number = 17 // enum WorkloadStatus
	zbCapacityField   protowire.Number = 27 // google.protobuf.UInt32Value
)

// shows reports whether an encoded discovery.Resource is the expected
// resource with the expected value.
func (e zbExpect) shows(res []byte) bool {
	if string(bench.First(res, []protowire.Number{3})) != e.name { // Resource.name
		return false
	}
	w := bench.First(res, []protowire.Number{2, 2, zbAddressWorkload}) // Resource.resource → Any.value → Address.workload
	switch e.field {
	case zbCapacityField:
		return varintField(bench.First(w, []protowire.Number{zbCapacityField}), 1) == e.value
	default:
		return varintField(w, e.field) == e.value
	}
}

// varintField returns the last value of a varint field of an encoded
// message, 0 when absent (proto3's default).
func varintField(b []byte, num protowire.Number) uint64 {
	var out uint64
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0
		}
		b = b[l:]
		if n == num && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return 0
			}
			out, b = v, b[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
			return 0
		}
		b = b[l:]
	}
	return out
}

// zbClient behaves like ztunnel on the wire: one delta ADS stream,
// wildcard subscriptions to Address and Authorization, an ACK for every
// response. It keeps no store: it reads responses only as far as the
// benchmark needs (type, nonce, resource counts, the probe's resource), so
// that the clients' CPU stays small next to the server's.
type zbClient struct {
	index   int
	network int
	want    int // Address resources in its network's complete set
	node    *core.Node
	conn    *grpc.ClientConn
	bytes   bench.WireBytes

	initial   int // Address resources received until the initial sync
	lastProbe int
}

func (c *zbClient) run(ctx context.Context, st *zbState) error {
	err := c.stream(ctx, st)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("ztunnel %d (%s): %w", c.index, zbNetworks[c.network], err)
}

func (c *zbClient) stream(ctx context.Context, st *zbState) error {
	s, err := c.conn.NewStream(ctx, &discovery.AggregatedDiscoveryService_ServiceDesc.Streams[1],
		discovery.AggregatedDiscoveryService_DeltaAggregatedResources_FullMethodName, grpc.ForceCodecV2(bench.RawCodec{}))
	if err != nil {
		return err
	}
	for _, typ := range []string{xds.AddressType, xds.AuthorizationType} {
		if err := s.SendMsg(&discovery.DeltaDiscoveryRequest{Node: c.node, TypeUrl: typ}); err != nil {
			return err
		}
	}
	synced, authorized := false, false
	for {
		// Probes are for changes after the initial sync.
		r := &zbResponse{st: st, network: c.network, lastProbe: c.lastProbe, probing: synced}
		if err := s.RecvMsg(r); err != nil {
			return err
		}
		now := time.Now()
		if err := s.SendMsg(&discovery.DeltaDiscoveryRequest{TypeUrl: r.typeURL, ResponseNonce: r.nonce}); err != nil {
			return err
		}
		switch r.typeURL {
		case xds.AuthorizationType:
			authorized = true
		case xds.AddressType:
			if synced {
				st.responses.Add(1)
			} else {
				c.initial += r.resources
			}
		default:
			return fmt.Errorf("unexpected response type %q", r.typeURL)
		}
		if !synced && authorized && c.initial >= c.want {
			synced = true
			st.synced[c.index] = time.Now() // after its ACK is sent
			st.ready.Add(1)
		}
		if p := r.hit; p != nil {
			c.lastProbe = p.id
			p.received[c.index] = now
			if p.remaining.Add(-1) == 0 {
				close(p.done)
			}
		}
		st.signal()
	}
}

// zbResponse is what a client reads of a DeltaDiscoveryResponse.
type zbResponse struct {
	// In: the probe to look for, unless the client has seen it already.
	st        *zbState
	network   int
	lastProbe int
	probing   bool

	typeURL, nonce     string
	resources, removed int
	hit                *zbProbe // the probe this response shows
}

// Parse reads an encoded DeltaDiscoveryResponse (for bench.RawCodec).
func (r *zbResponse) Parse(b []byte) error {
	// The probe is loaded once the response has arrived: a change's probe
	// is set before the change is applied.
	var p *zbProbe
	if r.probing {
		p = r.st.probe.Load()
	}
	if p != nil && p.id == r.lastProbe {
		p = nil
	}
	return bench.EachField(b, func(num protowire.Number, v []byte) {
		switch num {
		case 2: // resources
			r.resources++
			if p != nil && r.hit == nil && p.want[r.network].shows(v) {
				r.hit = p
			}
		case 4:
			r.typeURL = string(v)
		case 5:
			r.nonce = string(v)
		case 6: // removed_resources
			r.removed++
		}
	})
}

// checkZtunnelDecoder makes sure the clients' partial decoding agrees with
// real responses.
func checkZtunnelDecoder(b *testing.B) {
	b.Helper()
	resource := func(name string, w *workloadapi.Workload) *discovery.Resource {
		a, err := anypb.New(&workloadapi.Address{Type: &workloadapi.Address_Workload{Workload: w}})
		if err != nil {
			b.Fatal(err)
		}
		return &discovery.Resource{Name: name, Version: "v1", Resource: a}
	}
	resp := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: "7", TypeUrl: xds.AddressType, Nonce: "42", RemovedResources: []string{"gone"},
		Resources: []*discovery.Resource{
			resource("c00/uid-a", &workloadapi.Workload{Uid: "c00/uid-a", Status: workloadapi.WorkloadStatus_UNHEALTHY, Addresses: [][]byte{{10, 0, 0, 1}}}),
			resource("split", &workloadapi.Workload{Uid: "split", Capacity: wrapperspb.UInt32(99), Network: "net-b"}),
		},
	}
	enc, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	st := &zbState{}
	for _, tc := range []struct {
		network int
		want    zbExpect
		hit     bool
	}{
		{0, zbExpect{"c00/uid-a", zbStatusField, uint64(workloadapi.WorkloadStatus_UNHEALTHY)}, true},
		{0, zbExpect{"c00/uid-a", zbStatusField, uint64(workloadapi.WorkloadStatus_HEALTHY)}, false},
		{1, zbExpect{"split", zbCapacityField, 99}, true},
		{1, zbExpect{"split", zbCapacityField, 100}, false},
		{1, zbExpect{"other", zbCapacityField, 99}, false},
	} {
		p := &zbProbe{id: 1}
		p.want[tc.network] = tc.want
		st.probe.Store(p)
		r := &zbResponse{st: st, network: tc.network, probing: true}
		if err := (bench.RawCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(enc)}, r); err != nil {
			b.Fatal(err)
		}
		if r.typeURL != resp.GetTypeUrl() || r.nonce != resp.GetNonce() || r.resources != 2 || r.removed != 1 || (r.hit != nil) != tc.hit {
			b.Fatalf("partial decoding disagrees with proto.Marshal for %+v: type %q nonce %q resources %d removed %d hit %v",
				tc.want, r.typeURL, r.nonce, r.resources, r.removed, r.hit != nil)
		}
	}
}
