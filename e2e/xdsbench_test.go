//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/resources/reference"
)

// The fan-out benchmark's clusterset: 10 clusters on one network, each
// exporting the same 100 services with 10 endpoints: 10,000 endpoints, 100
// per service. Each proxy subscribes to 5 services.
const (
	fanoutClusters      = 10
	fanoutServices      = 100
	fanoutEndpoints     = 10 // per service and cluster
	fanoutSubscriptions = 5
	fanoutNetwork       = "net1"
	fanoutPort          = 8080

	// Proxies: P, and the smaller P that shows meshfed's encodes do not
	// depend on it; -short runs the smaller sizes.
	fanoutProxies      = 1000
	fanoutProxiesSmall = 100
	fanoutProxiesShort = 20

	// fanoutChanges are the changes per iteration. The baseline makes the
	// first changes of the same sequence only: at 1,000 proxies each of its
	// changes costs seconds of CPU, and all 100 would take the benchmark far
	// past its two-minute budget. Every change has the same shape (one
	// endpoint of one service in one cluster), so per-change figures
	// compare. The baseline still has 500 latency samples at P=1,000 (50
	// subscribers per change) and 100 at P=100.
	fanoutChanges              = 100
	fanoutBaselineChanges      = 10 // at P = fanoutProxies
	fanoutBaselineChangesSmall = 20 // at the smaller P
)

// fanoutTypes are the types every proxy subscribes to, in the order a
// proxyless gRPC client first asks for them.
var fanoutTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}

// serveFrom returns the channel an xDS server starts from: the registry's
// current snapshot, at once.
func serveFrom(reg *registry.Registry) <-chan clusterset.Snapshot {
	first := make(chan clusterset.Snapshot, 1)
	first <- reg.Current()
	return first
}

// encodesOf reads the xDS server's count of encoded resources from its
// metrics.
func encodesOf(b *testing.B, reg *prometheus.Registry) int64 {
	b.Helper()
	m := metricOf(b, reg, "meshfed_xds_resource_encodes_total")
	if m == nil {
		b.Fatal("no meshfed_xds_resource_encodes_total metric")
	}
	return int64(m.GetCounter().GetValue())
}

// metricOf returns the one metric of a name in reg, or nil.
func metricOf(b *testing.B, reg *prometheus.Registry, name string) *dto.Metric {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0]
		}
	}
	return nil
}

// fanoutRun is one sub-benchmark.
type fanoutRun struct {
	server  string // "meshfed" or "baseline"
	proxies int
	changes int // per iteration
}

func (r fanoutRun) name() string { return fmt.Sprintf("proxies=%d/server=%s", r.proxies, r.server) }

// fanoutResult is what one sub-benchmark measured, per change.
type fanoutResult struct {
	p50, p99  time.Duration
	cpu       time.Duration
	push      time.Duration // meshfed's own push time (its metric), 0 for the baseline
	allocs    float64
	encodes   float64
	bytes     float64
	responses float64
}

// BenchmarkXDSFanout measures the fan-out of endpoint changes to P
// proxyless-gRPC-like ADS clients over loopback gRPC, for
// meshfed's xDS server and for a baseline: go-control-plane's snapshot
// cache with one snapshot per node, all rebuilt and set on every change.
//
// Each iteration applies endpoint changes (one endpoint's ready flag, as a
// registry delta) one at a time: a change is complete when every client
// that subscribes the affected cluster has received an EDS response
// showing it, and every response the change causes has been received.
// meshfed runs at P=1,000 and P=100, to show that its encodes per change
// do not depend on P.
func BenchmarkXDSFanout(b *testing.B) {
	large, small := fanoutProxies, fanoutProxiesSmall
	if testing.Short() {
		large, small = fanoutProxiesSmall, fanoutProxiesShort
	}
	runs := []fanoutRun{
		{"meshfed", large, fanoutChanges},
		{"baseline", large, fanoutBaselineChanges},
		{"meshfed", small, fanoutChanges},
		{"baseline", small, fanoutBaselineChangesSmall},
	}
	results := map[fanoutRun]*fanoutResult{}
	for _, run := range runs {
		b.Run(run.name(), func(b *testing.B) {
			r := runFanout(b, run)
			results[run] = r
			if m := results[fanoutRun{"meshfed", run.proxies, fanoutChanges}]; run.server == "baseline" && m != nil {
				b.ReportMetric(ratio(r.cpu, m.cpu), "cpu-x-meshfed")
				b.ReportMetric(ratio(r.p99, m.p99), "p99-x-meshfed")
				// A benchmark's own log is always printed; its parent's is not.
				b.Log(fanoutTable(m, r))
			}
		})
	}
}

// fanoutTable compares meshfed's and the baseline's figures at one P.
func fanoutTable(m, base *fanoutResult) string {
	var t strings.Builder
	fmt.Fprintf(&t, "\n%-9s %8s %8s %11s %9s %11s %11s %9s %9s", "server", "p50-ms", "p99-ms", "cpu-ms/chg", "push-ms", "allocs/chg", "encodes/chg", "KiB/chg", "resp/chg")
	for _, row := range []struct {
		name string
		r    *fanoutResult
	}{{"meshfed", m}, {"baseline", base}} {
		r := row.r
		push := "-" // the baseline has no push of its own to time
		if r.push > 0 {
			push = fmt.Sprintf("%.1f", ms(r.push))
		}
		fmt.Fprintf(&t, "\n%-9s %8.1f %8.1f %11.1f %9s %11.0f %11.1f %9.1f %9.1f", row.name,
			ms(r.p50), ms(r.p99), ms(r.cpu), push, r.allocs, r.encodes, r.bytes/1024, r.responses)
	}
	fmt.Fprintf(&t, "\n%-9s %7.1fx %7.1fx %10.1fx %9s %10.1fx %10.1fx %8.1fx %8.1fx", "base/mesh",
		ratio(base.p50, m.p50), ratio(base.p99, m.p99), ratio(base.cpu, m.cpu), "",
		base.allocs/m.allocs, base.encodes/m.encodes, base.bytes/m.bytes, base.responses/m.responses)
	return t.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// fanoutBench is one sub-benchmark's clusterset, server and clients.
type fanoutBench struct {
	run         fanoutRun
	conns       []*registry.Conn // by cluster
	versions    []uint64         // shard versions, by cluster
	st          *fanoutState
	subscribers map[string][]int // cluster name → client indices
	metrics     *prometheus.Registry
	encodes     func() int64 // meshfed's; nil for the baseline
}

// runFanout sets up the clusterset, the server and the clients, then
// measures the changes.
func runFanout(b *testing.B, run fanoutRun) *fanoutResult {
	b.Helper()
	ctx, cancel := context.WithCancel(b.Context())
	g, ctx := errgroup.WithContext(ctx)
	var clientConns []*grpc.ClientConn
	b.Cleanup(func() {
		cancel()
		err := g.Wait()
		for _, conn := range clientConns {
			_ = conn.Close()
		}
		if err != nil {
			b.Errorf("fan-out: %v", err)
		}
	})

	f := &fanoutBench{run: run, st: &fanoutState{progress: newProgress()}, subscribers: map[string][]int{}, metrics: prometheus.NewRegistry()}
	reg := registry.New(registry.Config{})
	f.conns, f.versions = fanoutRegistry(b, reg)
	checkDecoder(b, reg.Current())
	specs := fanoutSpecs(run.proxies)

	var addr string
	switch run.server {
	case "meshfed":
		cfg := xds.Config{Addr: "127.0.0.1:0", PushInterval: hub.DefaultConfig().XDSPushInterval}
		srv, err := xds.New(cfg, f.metrics, testLogger(b))
		if err != nil {
			b.Fatal(err)
		}
		g.Go(func() error { return srv.Run(ctx, serveFrom(reg)) })
		addr, f.encodes = srv.Addr().String(), func() int64 { return encodesOf(b, f.metrics) }
	case "baseline":
		// The load harness's baseline (package bench), in process: it
		// learns each node's names from its requests.
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := grpc.NewServer()
		bs := bench.NewBaseline()
		bs.Register(ctx, srv)
		g.Go(func() error {
			go func() {
				<-ctx.Done()
				srv.Stop()
			}()
			return srv.Serve(lis)
		})
		g.Go(func() error {
			if err := bs.Run(ctx, reg.Current()); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		})
		addr = lis.Addr().String()
	}

	for i, s := range specs {
		c := newFanoutClient(i, s)
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(&f.st.bytes))
		if err != nil {
			b.Fatal(err)
		}
		clientConns = append(clientConns, conn)
		g.Go(func() error { return c.run(ctx, discovery.NewAggregatedDiscoveryServiceClient(conn), f.st) })
		for _, svc := range s.services {
			f.subscribers[fanoutClusterName(svc)] = append(f.subscribers[fanoutClusterName(svc)], i)
		}
	}
	setup, cancelSetup := context.WithTimeout(ctx, 60*time.Second)
	defer cancelSetup()
	if err := f.st.await(setup, func() bool { return f.st.ready.Load() == int64(run.proxies) }); err != nil {
		b.Fatalf("waiting for %d clients' initial resources (%d ready): %v", run.proxies, f.st.ready.Load(), err)
	}
	return f.measure(ctx, b)
}

// measure applies the changes and computes the per-change figures.
func (f *fanoutBench) measure(ctx context.Context, b *testing.B) *fanoutResult {
	b.Helper()
	st := f.st
	var latencies []time.Duration
	changes := 0
	ready := false // what the changes of this round set: rounds alternate
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0, bytes0, resp0, res0 := cpuTime(b), st.bytes.Load(), st.responses.Load(), st.resources.Load()
	var enc0 int64
	if f.encodes != nil {
		enc0 = f.encodes()
	}
	pushes0, pushTime0 := pushSeconds(b, f.metrics)
	for b.Loop() {
		for j := range f.run.changes {
			changes++
			latencies = append(latencies, f.change(ctx, b, changes, j, ready)...)
		}
		ready = !ready
	}
	if f.run.server == "meshfed" {
		// The subscribers of the last change may have their EDS before
		// every view's is encoded: let the push finish. Each change is one
		// push, since the next is applied only once the last is delivered.
		awaitPushes(ctx, b, f.metrics, pushes0+uint64(changes))
	}
	cpu := cpuTime(b) - cpu0
	runtime.ReadMemStats(&ms1)

	n := float64(changes)
	r := &fanoutResult{
		cpu:       time.Duration(float64(cpu) / n),
		allocs:    float64(ms1.Mallocs-ms0.Mallocs) / n,
		bytes:     float64(st.bytes.Load()-bytes0) / n,
		responses: float64(st.responses.Load()-resp0) / n,
	}
	if f.encodes != nil {
		r.encodes = float64(f.encodes()-enc0) / n
	} else {
		// go-control-plane marshals every resource of every response anew.
		r.encodes = float64(st.resources.Load()-res0) / n
	}
	if pushes, pushTime := pushSeconds(b, f.metrics); pushes > pushes0 {
		r.push = time.Duration((pushTime - pushTime0) / float64(pushes-pushes0) * float64(time.Second))
		b.ReportMetric(ms(r.push), "push-ms")
	}
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		r.p50 = latencies[(n-1)*50/100]
		r.p99 = latencies[(n*99+99)/100-1]
	}
	b.ReportMetric(ms(r.p50), "p50-ms")
	b.ReportMetric(ms(r.p99), "p99-ms")
	b.ReportMetric(ms(r.cpu), "cpu-ms/change")
	b.ReportMetric(r.allocs, "allocs/change")
	b.ReportMetric(r.encodes, "encodes/change")
	b.ReportMetric(r.bytes, "bytes/change")
	b.ReportMetric(r.responses, "responses/change")
	return r
}

// change applies the j-th change of the sequence (numbered id overall):
// service j's endpoint in cluster j%10 becomes ready or not. It waits until
// every subscriber has seen it and every response it causes has arrived,
// and returns each subscriber's latency from the registry's apply.
func (f *fanoutBench) change(ctx context.Context, b *testing.B, id, j int, ready bool) []time.Duration {
	b.Helper()
	st := f.st
	svc, cluster, ep := j, j%fanoutClusters, (j/fanoutClusters)%fanoutEndpoints
	name := fanoutClusterName(svc)
	subs := f.subscribers[name]
	probe := &fanoutProbe{
		change: id, cluster: name, address: fanoutAddress(cluster, svc, ep), present: ready,
		received: make([]time.Time, f.run.proxies), done: make(chan struct{}),
	}
	probe.remaining.Store(int64(len(subs)))
	if len(subs) == 0 {
		close(probe.done)
	}
	// The responses the change must cause: meshfed sends the changed EDS
	// resource to its subscribers; the baseline's new snapshot version
	// changes every type for every node.
	want := st.responses.Load() + int64(len(subs))
	if f.run.server == "baseline" {
		want = st.responses.Load() + int64(len(fanoutTypes)*f.run.proxies)
	}
	st.probe.Store(probe)

	endpoint := fanoutEndpoint(cluster, svc, ep)
	endpoint.Ready = ready
	f.versions[cluster]++
	update := &federationpb.ShardUpdate{Version: f.versions[cluster], Endpoints: []*federationpb.Endpoint{endpoint}}
	if err := f.conns[cluster].Apply("bench", update); err != nil {
		b.Fatal(err)
	}
	applied := time.Now()

	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := st.await(wait, func() bool { return isClosed(probe.done) && st.responses.Load() >= want }); err != nil {
		b.Fatalf("change %d (%s, %s ready=%v): %d of %d subscribers saw it; %d responses so far, want %d: %v",
			id, name, probe.address, ready, int64(len(subs))-probe.remaining.Load(), len(subs), st.responses.Load(), want, err)
	}
	out := make([]time.Duration, 0, len(subs))
	for _, i := range subs {
		out = append(out, max(probe.received[i].Sub(applied), 0))
	}
	return out
}

// pushSeconds reads meshfed's push histogram: pushes and their total
// duration (zero for the baseline, which registers nothing).
func pushSeconds(b *testing.B, reg *prometheus.Registry) (count uint64, sum float64) {
	b.Helper()
	m := metricOf(b, reg, "meshfed_xds_push_seconds")
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// awaitPushes waits until meshfed has completed n pushes. Nothing a client
// sees marks the end of a push, so this polls the server's metric.
func awaitPushes(ctx context.Context, b *testing.B, reg *prometheus.Registry, n uint64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if got, _ := pushSeconds(b, reg); got >= n {
			return
		}
		select {
		case <-ctx.Done():
			got, _ := pushSeconds(b, reg)
			b.Fatalf("meshfed completed %d pushes, want %d: %v", got, n, ctx.Err())
		case <-tick.C:
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fanoutHost(svc int) string {
	return fmt.Sprintf("svc-%02d.bench.svc.cluster.local", svc)
}

func fanoutClusterName(svc int) string { return resources.ClusterName(fanoutPort, fanoutHost(svc)) }

func fanoutListenerName(svc int) string { return resources.ListenerName(fanoutHost(svc), fanoutPort) }

func fanoutClusterID(c int) string { return fmt.Sprintf("c%02d", c) }

// fanoutLocality is cluster c's: two zones per region.
func fanoutLocality(c int) *federationpb.Locality {
	return &federationpb.Locality{Region: fmt.Sprintf("r%d", c/2), Zone: fmt.Sprintf("z%d", c)}
}

func fanoutAddress(c, svc, ep int) string { return fmt.Sprintf("10.%d.%d.%d", c, svc, ep+1) }

func fanoutEndpoint(c, svc, ep int) *federationpb.Endpoint {
	return &federationpb.Endpoint{
		Namespace: "bench", Service: fmt.Sprintf("svc-%02d", svc), Address: fanoutAddress(c, svc, ep),
		Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: fanoutPort}},
		Ready:    true,
		Serving:  true,
		Node:     "node-1",
		Locality: fanoutLocality(c),
	}
}

// fanoutRegistry connects the clusters and applies their full shards. It
// returns each cluster's Conn and shard version.
func fanoutRegistry(b *testing.B, reg *registry.Registry) ([]*registry.Conn, []uint64) {
	b.Helper()
	conns := make([]*registry.Conn, fanoutClusters)
	versions := make([]uint64, fanoutClusters)
	for c := range fanoutClusters {
		u := &federationpb.ShardUpdate{Version: 1, Full: true, Cluster: testCluster(fanoutClusterID(c), fanoutNetwork)}
		for svc := range fanoutServices {
			u.Services = append(u.Services, testService("bench", fmt.Sprintf("svc-%02d", svc)))
			for ep := range fanoutEndpoints {
				u.Endpoints = append(u.Endpoints, fanoutEndpoint(c, svc, ep))
			}
		}
		conns[c] = reg.Connect(federation.ClusterID(fanoutClusterID(c)), "bench")
		if err := conns[c].Apply("bench", u); err != nil {
			b.Fatal(err)
		}
		versions[c] = 1
	}
	if n := reg.Current().ServiceCount(); n != fanoutServices {
		b.Fatalf("registry has %d services, want %d", n, fanoutServices)
	}
	return conns, versions
}

// fanoutSpec is one proxy: its node and the services it calls.
type fanoutSpec struct {
	node     *core.Node
	services []int
}

// fanoutSpecs spreads p proxies over the clusters' localities. Proxy i
// calls services i, i+20, ... (mod 100), so each service has p/20 callers
// spread over the localities.
func fanoutSpecs(p int) []fanoutSpec {
	out := make([]fanoutSpec, p)
	for i := range p {
		c := (i/20 + i) % fanoutClusters
		l := fanoutLocality(c)
		out[i] = fanoutSpec{
			node: &core.Node{
				Id:       fmt.Sprintf("proxy-%04d", i),
				Locality: &core.Locality{Region: l.GetRegion(), Zone: l.GetZone()},
				Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
					xds.MetadataClusterID: structpb.NewStringValue(fanoutClusterID(c)),
					xds.MetadataNetwork:   structpb.NewStringValue(fanoutNetwork),
				}},
			},
		}
		for k := range fanoutSubscriptions {
			out[i].services = append(out[i].services, (i+k*fanoutServices/fanoutSubscriptions)%fanoutServices)
		}
	}
	return out
}

// fanoutState is what the clients share with the benchmark. Its
// WireBytes is the clients' stats handler, counting the bytes they receive.
type fanoutState struct {
	probe     atomic.Pointer[fanoutProbe]
	ready     atomic.Int64 // clients that have all their initial resources
	responses atomic.Int64 // responses received
	resources atomic.Int64 // resources in them
	bytes     bench.WireBytes
	progress
}

// fanoutProbe is the change in flight: clients that subscribe cluster
// record when an EDS response first shows address as present (or absent).
type fanoutProbe struct {
	change    int
	cluster   string
	address   string
	present   bool
	received  []time.Time // by client index, each written by its client only
	remaining atomic.Int64
	done      chan struct{} // closed when remaining reaches 0
}

// fanoutClient is a lightweight proxyless-gRPC-like ADS client: it
// subscribes by name to the listeners, routes, clusters and endpoints of
// its services, and ACKs every response.
type fanoutClient struct {
	index      int
	node       *core.Node
	names      map[string][]string // by type
	clusters   map[string]bool
	lastChange int
}

func newFanoutClient(index int, s fanoutSpec) *fanoutClient {
	c := &fanoutClient{index: index, node: s.node, names: map[string][]string{}, clusters: map[string]bool{}}
	for _, svc := range s.services {
		c.names[resourcev3.ListenerType] = append(c.names[resourcev3.ListenerType], fanoutListenerName(svc))
		for _, typ := range []string{resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
			c.names[typ] = append(c.names[typ], fanoutClusterName(svc))
		}
		c.clusters[fanoutClusterName(svc)] = true
	}
	return c
}

func (c *fanoutClient) run(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient, st *fanoutState) error {
	err := c.stream(ctx, ads, st)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("client %s: %w", c.node.GetId(), err)
}

func (c *fanoutClient) stream(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient, st *fanoutState) error {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	for i, typ := range fanoutTypes {
		req := &discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: c.names[typ]}
		if i == 0 {
			req.Node = c.node
		}
		if err := stream.Send(req); err != nil {
			return err
		}
	}
	complete := map[string]bool{} // types whose initial response had every name
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		now := time.Now()
		typ := resp.GetTypeUrl()
		if typ == resourcev3.EndpointType {
			c.check(resp, now, st)
		}
		if err := stream.Send(&discovery.DiscoveryRequest{
			TypeUrl: typ, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: c.names[typ],
		}); err != nil {
			return err
		}
		if len(complete) < len(fanoutTypes) && len(resp.GetResources()) == len(c.names[typ]) {
			complete[typ] = true
			if len(complete) == len(fanoutTypes) {
				st.ready.Add(1)
			}
		}
		st.responses.Add(1)
		st.resources.Add(int64(len(resp.GetResources())))
		st.signal()
	}
}

// check records the probe's change when resp shows it.
func (c *fanoutClient) check(resp *discovery.DiscoveryResponse, now time.Time, st *fanoutState) {
	p := st.probe.Load()
	if p == nil || p.change == c.lastChange || !c.clusters[p.cluster] {
		return
	}
	for _, a := range resp.GetResources() {
		if string(bench.First(a.GetValue(), claClusterName)) != p.cluster {
			continue
		}
		if hasAddress(a.GetValue(), p.address) != p.present {
			return
		}
		c.lastChange = p.change
		p.received[c.index] = now
		if p.remaining.Add(-1) == 0 {
			close(p.done)
		}
		return
	}
}

// Field numbers on the path from a ClusterLoadAssignment to its endpoints'
// addresses: endpoints → lb_endpoints → endpoint → address →
// socket_address → address.
var (
	claClusterName = []protowire.Number{1}
	claAddress     = []protowire.Number{2, 2, 1, 1, 1, 2}
)

// hasAddress reports whether an encoded ClusterLoadAssignment has an
// lb_endpoint at addr. It decodes only the path to the addresses: the
// clients stay cheap (the endpoints' metadata structs would cost them more
// than the server spends), so that the process's CPU time is mostly the
// server's.
func hasAddress(cla []byte, addr string) bool {
	found := false
	bench.EachAt(cla, claAddress, func(v []byte) { found = found || string(v) == addr })
	return found
}

// checkDecoder makes sure the clients' partial decoding agrees with the
// messages package reference builds.
func checkDecoder(b *testing.B, snap clusterset.Snapshot) {
	b.Helper()
	v, ok := snap.Service(federation.ServiceKey("bench", "svc-00"))
	if !ok {
		b.Fatal("no svc-00")
	}
	cla := reference.LoadAssignment(resources.Assignment(v, fanoutHost(0), resources.Ports(v)[0], resources.View{Network: fanoutNetwork}, nil))
	enc, err := proto.Marshal(cla)
	if err != nil {
		b.Fatal(err)
	}
	var decoded endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(enc, &decoded); err != nil {
		b.Fatal(err)
	}
	addr := decoded.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
	if got := string(bench.First(enc, claClusterName)); got != fanoutClusterName(0) {
		b.Fatalf("cluster name decoded as %q, want %q", got, fanoutClusterName(0))
	}
	if addr != fanoutAddress(0, 0, 0) || !hasAddress(enc, addr) || hasAddress(enc, "10.255.255.255") {
		b.Fatalf("partial decoding of the assignment's addresses disagrees with proto.Unmarshal (first address %q)", addr)
	}
}
