//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_istiod

package e2e

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/internal/istiodtest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testproc"
	"github.com/meshfed/meshfed/xds/resources"
)

// sideBySideSizeEnv picks BenchmarkSideBySide's size: "small" (the
// default: 3 clusters × 200 services × 10 endpoints) or "large" (3 × 500 ×
// 20). sideBySideExportEnv picks how the services are exported: "label"
// (the default: meshfed.io/export, what istiod is compared with, as it
// implements no MCS) or "mcs" (a ServiceExport each: the spokes write
// every import back into every cluster as well).
const (
	sideBySideSizeEnv   = "MESHFED_SIDE_BY_SIDE_SIZE"
	sideBySideExportEnv = "MESHFED_SIDE_BY_SIDE_EXPORT"
)

// sideBySideHubEnv and sideBySideSpokeEnv, when set, are added to the
// environment of meshfed-hub and of each meshfed-spoke, as space-separated
// NAME=VALUE pairs (GOGC=50, say): to compare GC targets on one workload.
const (
	sideBySideHubEnv   = "MESHFED_SIDE_BY_SIDE_HUB_ENV"
	sideBySideSpokeEnv = "MESHFED_SIDE_BY_SIDE_SPOKE_ENV"
)

// sideBySideIDs are the clusters' IDs; istiod runs in the first and reads
// the others through remote secrets.
var sideBySideIDs = []string{"east", "west", "north"}

// sideBySideWatched is how many services the gRPC client of each server
// watches, and sideBySideChanges how many endpoint changes are timed.
const (
	sideBySideWatched = 10
	sideBySideChanges = 100
)

// BenchmarkSideBySide runs meshfed (meshfed-hub and a meshfed-spoke per
// cluster, each its own process) and istiod (multi-cluster over remote
// secrets, istiod's own answer) side by side on the same three real API
// servers, each cluster exporting the same services with its own
// endpoints, ready pods and nodes. A proxyless gRPC client of each server,
// in the first cluster, watches 10 services; both see every endpoint
// change the benchmark makes in the second cluster. It reports each
// process's RSS once the clients have every endpoint and after the
// changes, the latency of a change (EndpointSlice update → the client has
// the new endpoints), and the CPU time each server spent per change. The
// whole run is one iteration: use -benchtime 1x. It needs istiod (make
// test-assets-istiod).
func BenchmarkSideBySide(b *testing.B) {
	istiodtest.RequireBinary(b)
	sc := kubeScale{services: 200, perService: 10, nodes: 20, namespaces: 5}
	switch size := cmp.Or(os.Getenv(sideBySideSizeEnv), "small"); size {
	case "small":
	case "large":
		sc = kubeScale{services: 500, perService: 20, nodes: 50, namespaces: 5}
	default:
		b.Fatalf("%s=%q: want small or large", sideBySideSizeEnv, size)
	}
	export := cmp.Or(os.Getenv(sideBySideExportEnv), "label")
	switch export {
	case "label":
		sc.byLabel = true
	case "mcs":
	default:
		b.Fatalf("%s=%q: want label or mcs", sideBySideExportEnv, export)
	}
	ctx := b.Context()

	bins := sideBySideBuild(b, "meshfed-hub", "meshfed-spoke")
	clusters := kubetest.Start(b, len(sideBySideIDs))
	for i, c := range clusters {
		sc.firstPod = i << 16
		scalePopulate(b, c.Config, sc)
	}
	east := clusters[0]
	createNamespace(b, east, istiodtest.SystemNamespace)
	for i, c := range clusters[1:] {
		kubeconfig, err := os.ReadFile(c.Kubeconfig)
		if err != nil {
			b.Fatal(err)
		}
		remoteSecret(b, east, sideBySideIDs[i+1], kubeconfig)
	}

	// Every server and client starts at once: each initial sync is timed
	// from here.
	start := time.Now()
	hubXDS, hubDebug := freeAddr(b), freeAddr(b)
	federationAddr := freeAddr(b)
	dir := b.TempDir()
	// The policy names the clusterset's members, as in production: the
	// hub's warm-up ends once they have synced, not at its deadline.
	policy := filepath.Join(dir, "clusters.yaml")
	var clustersYAML strings.Builder
	clustersYAML.WriteString("clusters:\n")
	for _, id := range sideBySideIDs {
		fmt.Fprintf(&clustersYAML, "- id: %s\n  networks: [net1]\n", id)
	}
	if err := os.WriteFile(policy, []byte(clustersYAML.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	hubCmd := exec.Command(bins["meshfed-hub"], "--insecure", "--clusters-config", policy,
		"--federation-addr", federationAddr, "--xds-addr", hubXDS, "--debug-addr", hubDebug)
	hubCmd.Env = append(os.Environ(), strings.Fields(os.Getenv(sideBySideHubEnv))...)
	hub := testproc.Start(b, "meshfed-hub", hubCmd, filepath.Join(dir, "hub.log"), 30*time.Second)
	spokes := make([]*testproc.Process, len(clusters))
	spokeDebug := make([]string, len(clusters))
	for i, c := range clusters {
		spokeDebug[i] = freeAddr(b)
		spokeCmd := exec.Command(bins["meshfed-spoke"],
			"--kubeconfig", c.Kubeconfig, "--hub", federationAddr, "--insecure",
			"--cluster-id", sideBySideIDs[i], "--network", "net1", "--debug-addr", spokeDebug[i])
		spokeCmd.Env = append(os.Environ(), strings.Fields(os.Getenv(sideBySideSpokeEnv))...)
		spokes[i] = testproc.Start(b, "meshfed-spoke "+sideBySideIDs[i], spokeCmd, filepath.Join(dir, sideBySideIDs[i]+".log"), 30*time.Second)
	}
	istiodStart := time.Now()
	istiod := istiodtest.Start(b, east, istiodtest.Options{ClusterID: sideBySideIDs[0]})
	client := istiodtest.Proxy{IP: "10.1.0.9", Pod: "client", Namespace: scaleNamespace(0, sc), ClusterID: sideBySideIDs[0], Proxyless: true}
	servers := []*sideBySideServer{
		{name: "meshfed", pids: append([]int{hub.Pid}, sideBySidePids(spokes)...), ads: sideBySideDial(b, hubXDS, client, hub), started: start, metrics: "http://" + hubDebug + "/metrics"},
		{name: "istiod", pids: []int{istiod.Pid()}, ads: istiodtest.Dial(b, istiod.XDSAddr, client), started: istiodStart, metrics: "http://" + istiod.MonitoringAddr + "/metrics"},
	}

	// The initial sync: every watched service has every cluster's
	// endpoints, all ready.
	all := len(clusters) * sc.perService
	names := make([]string, sideBySideWatched)
	for j := range names {
		names[j] = resources.ClusterName(8080, scaleService(j)+"."+scaleNamespace(j, sc)+".svc.cluster.local")
	}
	for _, s := range servers {
		for _, name := range names {
			s.ads.WaitCluster(b, name)
			s.ads.WaitEDS(b, name, sideBySideReady(all))
		}
		s.synced = time.Since(s.started)
	}
	suffix := cmp.Or(os.Getenv(sideBySideSizeEnv), "small") + "-" + export
	for _, s := range servers {
		s.rssSynced, s.fileSynced = sideBySideRSS(b, s.pids)
		s.heapSynced = sideBySideMetric(ctx, s.metrics, "go_memstats_heap_inuse_bytes")
	}
	spokeHeap := make([]float64, len(spokeDebug))
	for i, addr := range spokeDebug {
		spokeHeap[i] = sideBySideMetric(ctx, "http://"+addr+"/metrics", "go_memstats_heap_inuse_bytes")
	}
	// The spokes then write what the clusterset decided into their
	// clusters (export conditions, ServiceImports and their
	// EndpointSlices): the changes are timed once every process is quiet.
	// What each process spends idle is measured over a few seconds and
	// taken out of what it spends during the changes.
	const idleWindow = 5 * time.Second
	for _, s := range servers {
		sideBySideAwaitQuiet(b, s.pids)
		s.idleFrom = sideBySideCPUs(b, s.pids)
	}
	idleStart := time.Now()
	<-time.After(idleWindow)
	for _, s := range servers {
		s.cpuBefore = sideBySideCPUs(b, s.pids)
	}
	idle := time.Since(idleStart)
	churnStart := time.Now()

	// The changes: endpoint 0 of a watched service in the second cluster
	// turns not ready, then ready again, one change at a time; each is
	// timed at each client from the update to the arrival of the
	// assignment that has it.
	west := clusters[1]
	change := func(k int, timed bool) {
		j := k % sideBySideWatched
		ready := (k/sideBySideWatched)%2 == 1
		ns, svc := scaleNamespace(j, sc), scaleService(j)
		slice, err := west.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		slice.Endpoints[0].Conditions.Ready = ptr.To(ready)
		want := all - 1
		if ready {
			want = all
		}
		changed := time.Now()
		if _, err := west.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		for _, s := range servers {
			s.ads.WaitEDS(b, names[j], sideBySideReady(want))
			if timed {
				s.latencies = append(s.latencies, s.ads.EDSReceived(names[j]).Sub(changed))
			}
		}
	}
	b.ResetTimer()
	for k := range sideBySideChanges {
		change(k, true)
	}
	b.StopTimer()
	churn := time.Since(churnStart)
	for _, s := range servers {
		for i, cpu := range sideBySideCPUs(b, s.pids) {
			idleRate := float64(s.cpuBefore[i]-s.idleFrom[i]) / float64(idle)
			net := cpu - s.cpuBefore[i] - time.Duration(idleRate*float64(churn))
			s.cpuPerChange = append(s.cpuPerChange, max(net, 0)/sideBySideChanges)
			s.idlePerSecond = append(s.idlePerSecond, time.Duration(idleRate*float64(time.Second)))
		}
		s.rssAfter, _ = sideBySideRSS(b, s.pids)
	}

	// Profiles, once everything is measured (profiling costs memory and
	// CPU of its own): the heaps of the hub (after a collection) and of the
	// changing cluster's spoke (as of its last one), then CPU profiles of
	// both over a second round of changes, for `go tool pprof`.
	for name, url := range map[string]string{
		"hub-heap-" + suffix:   "http://" + hubDebug + "/debug/pprof/heap?gc=1",
		"spoke-heap-" + suffix: "http://" + spokeDebug[1] + "/debug/pprof/heap",
	} {
		if err := sideBySideSave(ctx, url, sideBySideCachePath(b, name+".pprof")); err != nil {
			b.Logf("heap profile %s: %v", name, err)
		}
	}
	profiles := sideBySideProfile(b, map[string]string{
		"hub-cpu-" + suffix: hubDebug, "spoke-cpu-" + suffix: spokeDebug[1],
	})
	for k := range sideBySideChanges {
		change(sideBySideChanges+k, false)
	}
	<-profiles

	const mib = 1 << 20
	var report strings.Builder
	fmt.Fprintf(&report, "%d clusters × %d services × %d endpoints (%d endpoints, %d ready pods, %d nodes each), exported by %s; a proxyless gRPC client of each server watches %d services; %d endpoint changes in %s\n\n",
		len(clusters), sc.services, sc.perService, sc.endpoints(), sc.endpoints(), sc.nodes, export, sideBySideWatched, sideBySideChanges, sideBySideIDs[1])
	fmt.Fprintf(&report, "| figure | meshfed (meshfed-hub + %d meshfed-spoke) | istiod (remote secrets) |\n|---|---|---|\n", len(clusters))
	row := func(figure string, f func(*sideBySideServer) string) {
		fmt.Fprintf(&report, "| %s | %s | %s |\n", figure, f(servers[0]), f(servers[1]))
	}
	row("initial sync (start → the client has every endpoint)", func(s *sideBySideServer) string { return s.synced.Round(time.Millisecond).String() })
	row("server RSS, synced", func(s *sideBySideServer) string { return fmt.Sprintf("%.1f MiB", float64(s.rssSynced[0])/mib) })
	row("of it, the binary's pages (RssFile)", func(s *sideBySideServer) string { return fmt.Sprintf("%.1f MiB", float64(s.fileSynced[0])/mib) })
	row("server heap in use, synced (go_memstats_heap_inuse_bytes)", func(s *sideBySideServer) string {
		if s.heapSynced < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f MiB", s.heapSynced/mib)
	})
	row("server RSS, after the changes", func(s *sideBySideServer) string { return fmt.Sprintf("%.1f MiB", float64(s.rssAfter[0])/mib) })
	row("each spoke's RSS, synced (of it, heap in use / the binary's pages)", func(s *sideBySideServer) string {
		if len(s.rssSynced) == 1 {
			return "-"
		}
		var parts []string
		for i, r := range s.rssSynced[1:] {
			parts = append(parts, fmt.Sprintf("%.1f (%.1f / %.1f)", float64(r)/mib, spokeHeap[i]/mib, float64(s.fileSynced[i+1])/mib))
		}
		return strings.Join(parts, "; ") + " MiB"
	})
	row("each spoke's RSS, after the changes", func(s *sideBySideServer) string {
		if len(s.rssAfter) == 1 {
			return "-"
		}
		var parts []string
		for _, r := range s.rssAfter[1:] {
			parts = append(parts, fmt.Sprintf("%.1f", float64(r)/mib))
		}
		return strings.Join(parts, " / ") + " MiB"
	})
	row("every process, after the changes", func(s *sideBySideServer) string {
		return fmt.Sprintf("%.1f MiB", float64(sideBySideSum(s.rssAfter))/mib)
	})
	row("change → client: p50 / p99 / max", func(s *sideBySideServer) string {
		slices.Sort(s.latencies)
		q := func(p float64) time.Duration {
			return s.latencies[int(p*float64(len(s.latencies)-1))].Round(100 * time.Microsecond)
		}
		return fmt.Sprintf("%v / %v / %v", q(0.5), q(0.99), q(1))
	})
	row("CPU idle, per second: every process", func(s *sideBySideServer) string {
		return sideBySideSum(s.idlePerSecond).Round(100 * time.Microsecond).String()
	})
	row("CPU per change: the server", func(s *sideBySideServer) string { return s.cpuPerChange[0].Round(10 * time.Microsecond).String() })
	row("CPU per change: each spoke", func(s *sideBySideServer) string {
		if len(s.cpuPerChange) == 1 {
			return "-"
		}
		var parts []string
		for _, c := range s.cpuPerChange[1:] {
			parts = append(parts, c.Round(10*time.Microsecond).String())
		}
		return strings.Join(parts, " / ")
	})
	row("CPU per change: every process", func(s *sideBySideServer) string {
		return sideBySideSum(s.cpuPerChange).Round(10 * time.Microsecond).String()
	})
	// A benchmark's log is cut at a few lines: the table goes to a file.
	path := sideBySideCachePath(b, "sidebyside-"+suffix+".md")
	if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("the results' table: %s", path)

	for _, s := range servers {
		b.ReportMetric(float64(s.rssSynced[0])/mib, "MiB-"+s.name+"-rss")
		b.ReportMetric(float64(sideBySideSum(s.rssAfter))/mib, "MiB-"+s.name+"-rss-all")
		b.ReportMetric(float64(s.latencies[len(s.latencies)*99/100].Microseconds())/1e3, "ms-"+s.name+"-p99")
		b.ReportMetric(float64(sideBySideSum(s.cpuPerChange).Microseconds())/1e3, "ms-"+s.name+"-cpu/change")
	}
}

// sideBySideServer is one side: its processes (the server's first), its
// client and what was measured.
type sideBySideServer struct {
	name    string
	pids    []int
	ads     *istiodtest.ADSClient
	started time.Time
	metrics string // the server's /metrics URL

	heapSynced          float64 // bytes; -1: not exported
	synced              time.Duration
	rssSynced, rssAfter []int64
	fileSynced          []int64         // of rssSynced, the pages of files (the binary's)
	idleFrom, cpuBefore []time.Duration // by process
	idlePerSecond       []time.Duration
	cpuPerChange        []time.Duration // the idle rate taken out
	latencies           []time.Duration
}

// sideBySideBuild builds the commands (cmd/NAME) into a temporary
// directory, as the images build them (static, trimmed paths, without
// gRPC's tracing), and returns their paths by name. Static matters to
// what is measured: a binary linked against libc has its pages in its RSS
// too (1.3 MiB), and istiod is built static as well.
func sideBySideBuild(b *testing.B, commands ...string) map[string]string {
	b.Helper()
	dir := b.TempDir()
	bins := map[string]string{}
	for _, command := range commands {
		bin := filepath.Join(dir, command)
		cmd := exec.CommandContext(b.Context(), "go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", bin, "github.com/meshfed/meshfed/cmd/"+command)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("go build %s: %v\n%s", command, err, out)
		}
		bins[command] = bin
	}
	return bins
}

// sideBySideDial connects the client to the hub once its xDS port
// listens: the hub opens it after its warm-up.
func sideBySideDial(b *testing.B, addr string, p istiodtest.Proxy, hub *testproc.Process) *istiodtest.ADSClient {
	b.Helper()
	if !pollUntil(2*time.Minute, func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	}) {
		b.Fatalf("the hub's xDS port %s did not open%s", addr, hub.LogTail(20))
	}
	return istiodtest.Dial(b, addr, p)
}

// sideBySideReady is a condition on an assignment: n of its endpoints are
// served as ready (absent or unhealthy ones are not).
func sideBySideReady(n int) func(*endpointv3.ClusterLoadAssignment) bool {
	return func(cla *endpointv3.ClusterLoadAssignment) bool {
		ready := 0
		for _, e := range istiodtest.Endpoints(cla) {
			if e.Health == corev3.HealthStatus_UNKNOWN || e.Health == corev3.HealthStatus_HEALTHY {
				ready++
			}
		}
		return cla != nil && ready == n
	}
}

func sideBySidePids(procs []*testproc.Process) []int {
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.Pid
	}
	return pids
}

// sideBySideRSS reads each process's VmRSS and, of it, RssFile: the
// pages of mapped files, nearly all of them the binary's.
func sideBySideRSS(b *testing.B, pids []int) (rss, file []int64) {
	b.Helper()
	rss, file = make([]int64, len(pids)), make([]int64, len(pids))
	for i, pid := range pids {
		m := procStatusBytes(b, pid, "VmRSS", "RssFile")
		rss[i], file[i] = m[0], m[1]
	}
	return rss, file
}

// sideBySideCachePath is ../.cache/NAME, where the benchmark leaves its
// table and profiles.
func sideBySideCachePath(b *testing.B, name string) string {
	b.Helper()
	path, err := filepath.Abs(filepath.Join("..", ".cache", name))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	return path
}

func sideBySideSum[T int64 | time.Duration](v []T) T {
	var sum T
	for _, x := range v {
		sum += x
	}
	return sum
}

// sideBySideProfile fetches a 10-second CPU profile from each debug
// address into ../.cache/NAME.pprof, for `go tool pprof`, and closes the
// channel it returns when they are saved. A failure is logged: the
// figures do not depend on it.
func sideBySideProfile(b *testing.B, addrs map[string]string) <-chan struct{} {
	b.Helper()
	done := make(chan struct{})
	ctx := b.Context()
	paths := map[string]string{}
	for name := range addrs {
		paths[name] = sideBySideCachePath(b, name+".pprof")
	}
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for name, addr := range addrs {
			wg.Go(func() {
				if err := sideBySideSave(ctx, "http://"+addr+"/debug/pprof/profile?seconds=10", paths[name]); err != nil {
					b.Logf("CPU profile %s: %v", name, err)
				}
			})
		}
		wg.Wait()
	}()
	return done
}

func sideBySideSave(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// sideBySideMetric reads an unlabelled metric from a /metrics URL; -1
// when it cannot.
func sideBySideMetric(ctx context.Context, url, name string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// sideBySideAwaitQuiet waits, for up to 5 minutes, until none of the
// processes used more than 2% of a core over a second.
func sideBySideAwaitQuiet(b *testing.B, pids []int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	before := sideBySideCPUs(b, pids)
	for {
		<-tick.C
		now := sideBySideCPUs(b, pids)
		quiet := true
		for i := range now {
			quiet = quiet && now[i]-before[i] <= 20*time.Millisecond
		}
		if quiet {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("processes %v still busy after 5 minutes (CPU over the last second: %v then %v)", pids, before, now)
		}
		before = now
	}
}

// sideBySideCPUs is the user and system CPU time each process has used.
func sideBySideCPUs(b *testing.B, pids []int) []time.Duration {
	b.Helper()
	cpus := make([]time.Duration, len(pids))
	for i, pid := range pids {
		var ticks int64
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		// Fields after the command's closing parenthesis: state is the
		// first, utime and stime the 12th and 13th.
		_, rest, _ := strings.Cut(string(data), ") ")
		fields := strings.Fields(rest)
		for _, f := range fields[11:13] {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				b.Fatalf("/proc/%d/stat: %v", pid, err)
			}
			ticks += n
		}
		// USER_HZ is 100 on Linux.
		cpus[i] = time.Duration(ticks) * 10 * time.Millisecond
	}
	return cpus
}
