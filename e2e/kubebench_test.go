//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/kubetest"
)

// scaleSpokeMemLimitEnv and scaleSpokeGOGCEnv, when set, are the spoke
// process's GOMEMLIMIT and GOGC (not this process's).
const (
	scaleSpokeMemLimitEnv = "MESHFED_SCALE_SPOKE_GOMEMLIMIT"
	scaleSpokeGOGCEnv     = "MESHFED_SCALE_SPOKE_GOGC"
	// scaleSpokeCmdEnv picks the spoke's binary: meshfed-spoke (the
	// default) or meshfed.
	scaleSpokeCmdEnv = "MESHFED_SCALE_SPOKE_CMD"
)

// scaleCluster is the bench cluster's ID at the hub.
const scaleCluster federation.ClusterID = "east"

// BenchmarkKubeSpokeScale runs a spoke, as its own process, against one
// real API server holding 5,000 exported services, 50,000 endpoints in
// EndpointSlices, 50,000 ready pods and 500 nodes, created before the
// spoke starts, and an in-process hub. It measures the initial
// sync (spoke start → the hub's registry holds every endpoint), the spoke's
// RSS after it, the bytes of the initial sync and of one endpoint change
// (the hub's meshfed_hub_shard_received_bytes_total), and the latency of an
// endpoint change (EndpointSlice update → the hub's registry shows it).
// -short builds a 10× smaller cluster. The whole run is one iteration:
// use -benchtime 1x.
func BenchmarkKubeSpokeScale(b *testing.B) {
	sc := kubeScale{services: 5_000, perService: 10, nodes: 500, namespaces: 50}
	if testing.Short() {
		sc = kubeScale{services: 500, perService: 10, nodes: 50, namespaces: 5}
	}
	b.ReportAllocs()
	ctx := b.Context()

	// Build the spoke's binary while the API server starts and fills:
	// meshfed-spoke, or meshfed (run as `meshfed spoke`) when
	// MESHFED_SCALE_SPOKE_CMD=meshfed.
	command := cmp.Or(os.Getenv(scaleSpokeCmdEnv), "meshfed-spoke")
	var spokeArgs []string
	switch command {
	case "meshfed-spoke":
	case "meshfed":
		spokeArgs = []string{"spoke"}
	default:
		b.Fatalf("%s=%q: want meshfed-spoke or meshfed", scaleSpokeCmdEnv, command)
	}
	bin := filepath.Join(b.TempDir(), command)
	built := make(chan error, 1)
	go func() {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/meshfed/meshfed/cmd/"+command).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build: %w\n%s", err, out)
		}
		built <- err
	}()

	c := kubetest.Start(b, 1)[0]
	createStart := time.Now()
	objects := scalePopulate(b, c.Config, sc)
	createTime := time.Since(createStart)
	if err := <-built; err != nil {
		b.Fatal(err)
	}

	h := scaleHub(b)
	reg := h.Registry()
	metricsURL := "http://" + h.DebugAddr().String() + "/metrics"
	heapBefore := scaleHeapInuse()

	// The spoke process, until the benchmark ends.
	b.ResetTimer()
	syncStart := time.Now()
	logPath := filepath.Join(b.TempDir(), "spoke.log")
	debugAddr := freeAddr(b)
	pid := scaleRunSpoke(b, bin, logPath, append(spokeArgs, "--kubeconfig", c.Kubeconfig, "--hub", h.FederationAddr().String(),
		"--insecure", "--cluster-id", string(scaleCluster), "--network", "net-east", "--log-level", "info",
		"--debug-addr", debugAddr)...)
	synced := scaleAwait(b, reg, 5*time.Minute, logPath, "the initial sync", func(s clusterset.Snapshot) bool {
		return scaleEndpointCount(s) == sc.endpoints()
	})
	syncTime := time.Since(syncStart)
	rss, hwm := scaleProcMem(b, pid)
	gcAtSync := scaleLastGC(logPath)
	// The spoke returns the sync's memory once the hub's Ack arrives.
	scaleAwaitLog(b, logPath, "free heap returned to the OS", time.Minute)
	rssReleased, _ := scaleProcMem(b, pid)
	heapAfter := scaleHeapInuse()
	syncBytes := scaleReceivedBytes(b, metricsURL)
	// The spoke's heap profile, for `go tool pprof -sample_index=inuse_space`.
	b.Logf("spoke heap profile after sync: %s", scaleHeapProfile(b, debugAddr, "spoke-heap.pprof"))
	if n := synced.ServiceCount(); n != sc.services {
		b.Errorf("%d services at the hub, want %d", n, sc.services)
	}
	if n := synced.WorkloadCount(); n != sc.endpoints() {
		b.Errorf("%d workloads at the hub, want %d", n, sc.endpoints())
	}

	// The spoke then marks each ServiceExport Valid; wait for it, so that
	// the endpoint changes below are measured on a quiet spoke.
	validStart := time.Now()
	scaleAwaitExportsValid(b, c.MCS, sc.services)
	validTime := time.Since(validStart)
	rssValid, hwmValid := scaleProcMem(b, pid)
	// After the RSS reading: the profile's forced collection would lower it.
	b.Logf("spoke heap profile, exports valid: %s", scaleHeapProfile(b, debugAddr, "spoke-heap-steady.pprof"))

	// One endpoint's ready condition flips, ten times.
	const changes = 10
	latencies := make([]time.Duration, 0, changes)
	deltas := make([]float64, 0, changes)
	ns, svc := scaleNamespace(0, sc), scaleService(0)
	addr := scalePodIP(0)
	for i := range changes {
		ready := i%2 == 1
		before := scaleReceivedBytes(b, metricsURL)
		start := time.Now()
		slice, err := c.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		slice.Endpoints[0].Conditions.Ready = ptr.To(ready)
		if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		scaleAwait(b, reg, 30*time.Second, logPath, "an endpoint change", func(s clusterset.Snapshot) bool {
			e := scaleEndpoint(s, ns+"/"+svc, addr)
			return (e != nil && e.GetReady()) == ready
		})
		latencies = append(latencies, time.Since(start))
		deltas = append(deltas, scaleReceivedBytes(b, metricsURL)-before)
	}
	b.StopTimer()
	slices.Sort(latencies)
	slices.Sort(deltas)
	latency, delta := latencies[changes/2], deltas[changes/2]

	const mib = 1 << 20
	b.ReportMetric(createTime.Seconds(), "s/create")
	b.ReportMetric(syncTime.Seconds(), "s/initial-sync")
	b.ReportMetric(float64(rss)/mib, "MiB-spoke-rss")
	b.ReportMetric(float64(rssValid)/mib, "MiB-spoke-rss-steady")
	b.ReportMetric(float64(max(hwm, hwmValid))/mib, "MiB-spoke-peak-rss")
	b.ReportMetric(syncBytes, "bytes/initial-sync")
	b.ReportMetric(delta, "bytes/change")
	b.ReportMetric(float64(latency.Microseconds())/1e3, "ms/change")
	b.ReportMetric(validTime.Seconds(), "s/exports-valid")

	b.Logf("\n"+
		"| cluster | %d services (%d namespaces), %d endpoints, %d pods, %d nodes |\n"+
		"|---|---|\n"+
		"| objects created (%d API requests, 32 workers) | %v (%.0f req/s) |\n"+
		"| spoke (%s): %s (GOMEMLIMIT %q, GOGC %q) |\n"+
		"| initial sync: spoke start → hub has every endpoint | %v |\n"+
		"| initial sync bytes (hub received) | %.0f B (%.1f B/endpoint) |\n"+
		"| spoke RSS after sync (VmRSS) / peak (VmHWM) | %.1f MiB / %.1f MiB |\n"+
		"| spoke's last GC before the RSS reading (gctrace; A->B->C MB: heap at GC start, at GC end, live) | %s |\n"+
		"| spoke RSS once it returned the sync's free heap to the OS | %.1f MiB |\n"+
		"| spoke RSS after exports valid / peak | %.1f MiB / %.1f MiB |\n"+
		"| test process heap in use, after sync − before spoke (hub + registry; the spoke is another process) | %+.1f MiB |\n"+
		"| all ServiceExports Valid, after sync | %v |\n"+
		"| endpoint change: bytes, median (min–max) of %d | %.0f B (%.0f–%.0f) |\n"+
		"| endpoint change: latency, median (min–max) of %d | %v (%v–%v) |",
		sc.services, sc.namespaces, sc.endpoints(), sc.endpoints(), sc.nodes,
		objects, createTime.Round(time.Millisecond), float64(objects)/createTime.Seconds(),
		strings.Join(append([]string{command}, spokeArgs...), " "), scaleCachesSyncedLine(logPath), os.Getenv(scaleSpokeMemLimitEnv), os.Getenv(scaleSpokeGOGCEnv),
		syncTime.Round(time.Millisecond),
		syncBytes, syncBytes/float64(sc.endpoints()),
		float64(rss)/mib, float64(hwm)/mib, gcAtSync, float64(rssReleased)/mib,
		float64(rssValid)/mib, float64(hwmValid)/mib,
		float64(int64(heapAfter)-int64(heapBefore))/mib,
		validTime.Round(time.Millisecond),
		changes, delta, deltas[0], deltas[changes-1],
		changes, latency.Round(time.Microsecond), latencies[0].Round(time.Microsecond), latencies[changes-1].Round(time.Microsecond))
}

// scaleHub starts an insecure hub with its debug endpoint (for /metrics)
// until the benchmark ends.
func scaleHub(b *testing.B) *hub.Hub {
	b.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "", "127.0.0.1:0"
	h, err := hub.New(cfg, testLogger(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("hub: %v", err)
		}
	})
	return h
}

// scaleRunSpoke starts the spoke's binary with args, its output in
// logPath, and stops it (SIGTERM, then SIGKILL after 30 s) when the
// benchmark ends. It returns the process ID.
func scaleRunSpoke(b *testing.B, bin, logPath string, args ...string) int {
	b.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// gctrace tells the spoke's live heap apart from its RSS.
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	// The memory limit a container's would give the spoke (its
	// --memory-limit-ratio of the cgroup's limit), for this process only.
	if limit := os.Getenv(scaleSpokeMemLimitEnv); limit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+limit)
	}
	if gogc := os.Getenv(scaleSpokeGOGCEnv); gogc != "" {
		cmd.Env = append(cmd.Env, "GOGC="+gogc)
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		defer func() { _ = logFile.Close() }()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case err := <-exited:
			var exit *exec.ExitError
			signaled := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled()
			if err != nil && !signaled {
				b.Errorf("spoke: %v%s", err, scaleLogTail(logPath))
			}
		case <-timer.C:
			_ = cmd.Process.Kill()
			b.Logf("spoke killed: %v", <-exited)
			b.Errorf("spoke did not stop within 30 s of SIGTERM%s", scaleLogTail(logPath))
		}
	})
	return cmd.Process.Pid
}

// scaleAwait waits up to timeout for cond on the registry's snapshots.
func scaleAwait(b *testing.B, reg *registry.Registry, timeout time.Duration, logPath, what string, cond func(clusterset.Snapshot) bool) clusterset.Snapshot {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), timeout)
	defer cancel()
	s, err := clusterset.Await(ctx, reg.Current(), cond)
	if err != nil {
		b.Fatalf("waiting for %s: %v (the hub has %d endpoints of %s; status %+v)%s",
			what, err, scaleEndpointCount(s), scaleCluster, reg.Status(), scaleLogTail(logPath))
	}
	return s
}

// scaleEndpointCount counts the bench cluster's endpoints in a snapshot.
func scaleEndpointCount(s clusterset.Snapshot) int {
	n := 0
	for _, v := range s.Services() {
		for _, c := range v.Clusters {
			if c.Cluster == scaleCluster {
				n += len(c.Endpoints)
			}
		}
	}
	return n
}

func scaleEndpoint(s clusterset.Snapshot, key, addr string) *clusterset.TaggedEndpoint {
	v, ok := s.Service(key)
	if !ok {
		return nil
	}
	for _, c := range v.Clusters {
		if c.Cluster != scaleCluster {
			continue
		}
		for _, e := range c.Endpoints {
			if e.GetAddress() == addr {
				return &e
			}
		}
	}
	return nil
}

// scaleAwaitExportsValid polls, for up to 5 minutes, until n ServiceExports
// have the condition Valid=True.
func scaleAwaitExportsValid(b *testing.B, mcs mcsclientset.Interface, n int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		list, err := mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).List(b.Context(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		valid := 0
		for _, se := range list.Items {
			if slices.ContainsFunc(se.Status.Conditions, func(c metav1.Condition) bool {
				return c.Type == "Valid" && c.Status == metav1.ConditionTrue
			}) {
				valid++
			}
		}
		if valid == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d ServiceExports valid after 5 minutes", valid, n)
		}
		<-tick.C
	}
}

// scaleReceivedBytes reads the hub's meshfed_hub_shard_received_bytes_total
// for the bench cluster from its /metrics.
func scaleReceivedBytes(b *testing.B, url string) float64 {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	prefix := fmt.Sprintf("meshfed_hub_shard_received_bytes_total{cluster=%q} ", scaleCluster)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	b.Fatalf("no %s in the hub's /metrics", strings.TrimSpace(prefix))
	return 0
}

// scaleProcMem reads a process's VmRSS and VmHWM (peak RSS), in bytes.
func scaleProcMem(b *testing.B, pid int) (rss, hwm int64) {
	b.Helper()
	m := procStatusBytes(b, pid, "VmRSS", "VmHWM")
	return m[0], m[1]
}

// scaleHeapInuse is this process's heap in use after a collection.
func scaleHeapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// scaleCachesSyncedLine is the spoke's "caches synced" log line.
func scaleCachesSyncedLine(logPath string) string {
	data, _ := os.ReadFile(logPath)
	for line := range bytes.Lines(data) {
		if bytes.Contains(line, []byte("caches synced")) {
			return strings.TrimSpace(string(line))
		}
	}
	return "(no caches synced line in its log)"
}

func scaleLogTail(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	data, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return "\nlast lines of the spoke's log:\n" + strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// scaleLastGC is the spoke's last gctrace line so far.
// scaleAwaitLog waits until the spoke's log has a line containing s.
func scaleAwaitLog(b *testing.B, logPath, s string, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if data, _ := os.ReadFile(logPath); bytes.Contains(data, []byte(s)) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("no %q in the spoke's log after %v:\n%s", s, timeout, scaleLogTail(logPath))
		}
		<-tick.C
	}
}

func scaleLastGC(logPath string) string {
	data, _ := os.ReadFile(logPath)
	last := "(none)"
	for line := range bytes.Lines(data) {
		if bytes.HasPrefix(line, []byte("gc ")) {
			last = strings.TrimSpace(string(line))
		}
	}
	return last
}

// scaleHeapProfile saves the spoke's heap profile under the repository's
// git-ignored .cache/ and returns its path.
func scaleHeapProfile(b *testing.B, debugAddr, name string) string {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, "http://"+debugAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Sprintf("(not fetched: %v)", err)
	}
	defer func() { _ = resp.Body.Close() }()
	path, err := filepath.Abs(filepath.Join("..", ".cache", name))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := io.Copy(f, resp.Body); err != nil {
		b.Fatal(err)
	}
	return path
}
