package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/meshfed/meshfed/hub/debug"
)

// Result is what one server's run measured.
type Result struct {
	Server  string `json:"server"`
	Clients Mix    `json:"clients"`
	Changes int    `json:"changes"`

	// Propagation: spoke observation → each client's receipt, over the
	// (change, client) pairs of every client ("all"), of the gRPC and Envoy
	// clients ("xds"), and of each kind; Missed pairs were never seen.
	Latency map[string]latencyStats `json:"latency"`
	Missed  int                     `json:"missedPairs"`
	// HubPropagation is what the hub itself measured of the churn
	// (meshfed_propagation_seconds: spoke observation → each proxy's ACK,
	// every kind), estimated from its histogram's buckets; HubPairs is its
	// count. The baseline measures nothing.
	HubPropagation percentiles `json:"hubPropagationMs"`
	HubPairs       int         `json:"hubPropagationPairs,omitempty"`

	HeapIdleBytes   float64 `json:"heapIdleBytes"`
	HeapSyncedBytes float64 `json:"heapSyncedBytes"` // spokes synced, no clients
	// HeapSyncedLiveBytes is the objects within HeapSyncedBytes: the rest
	// is the free space of the spans they share.
	HeapSyncedLiveBytes float64 `json:"heapSyncedLiveBytes"`
	HeapClientsBytes    float64 `json:"heapClientsBytes"`
	RSSBytes            float64 `json:"rssBytes"`       // with clients, after the churn
	RSSSyncedBytes      float64 `json:"rssSyncedBytes"` // spokes synced, no clients
	RSSPerEndpoint      float64 `json:"rssPerEndpointBytes"`
	HeapPerEndpoint     float64 `json:"heapPerEndpointBytes"`
	// Per client: what each of the second half of a sort adds; the first
	// half's total includes the encoded resources their views share.
	HeapPerClient        float64 `json:"heapPerXDSClientBytes"` // a gRPC or Envoy client
	HeapPerZtunnel       float64 `json:"heapPerZtunnelBytes,omitempty"`
	HeapFirstClients     float64 `json:"heapFirstXDSClientsBytes"`
	HeapFirstZtunnels    float64 `json:"heapFirstZtunnelsBytes,omitempty"`
	CPUPerChangeMillis   float64 `json:"cpuPerChangeMs"`
	EncodesPerChange     float64 `json:"encodesPerChange,omitempty"`
	SpokeBytesPerChange  float64 `json:"spokeToHubBytesPerChange"`
	ClientBytesPerChange float64 `json:"hubToClientsBytesPerChange"`

	SpokeSyncSeconds  float64 `json:"spokeSyncSeconds"`
	ClientSyncSeconds float64 `json:"clientSyncSeconds"`
	// RestartSeconds: hub SIGKILL and restart → every client has the full
	// state again.
	RestartSeconds float64 `json:"restartConvergeSeconds,omitempty"`
	// RestartPartial counts the gRPC and Envoy clients' EDS responses
	// after the restart that lacked endpoints the clusterset has.
	RestartPartial int64 `json:"restartPartialResponses"`
}

// Report is a whole harness run.
type Report struct {
	Config  reportConfig `json:"config"`
	Results []Result     `json:"results"`
}

type reportConfig struct {
	Clusters, ServicesPerCluster, EndpointsPerCluster, Replicas int
	Endpoints, Services                                         int
	Clients                                                     Mix
	Subscriptions                                               int
	Rate                                                        float64
	Duration                                                    string
}

// Run runs the harness: for each server, a hub process, C spokes, P
// clients, then churn, then (optionally) a hub restart. Progress goes to
// progress; the caller prints the report.
func Run(ctx context.Context, cfg Config, logDir string, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w, _ := newWorld(cfg)
	rep := &Report{Config: reportConfig{
		Clusters: w.clusters, ServicesPerCluster: w.perCluster, EndpointsPerCluster: w.endpoints, Replicas: w.replicas,
		Endpoints: w.clusters * w.endpoints, Services: w.services, Clients: cfg.Clients, Subscriptions: w.subscriptions,
		Rate: cfg.Rate, Duration: cfg.Duration.String(),
	}}
	for _, server := range cfg.Servers {
		r := &runner{cfg: cfg, w: w, server: server, logDir: logDir, out: progress}
		res, err := r.run(ctx)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", server, err)
		}
		rep.Results = append(rep.Results, *res)
	}
	return rep, nil
}

// JSON returns the report as indented JSON.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

type runner struct {
	cfg    Config
	w      world
	server string
	logDir string
	out    io.Writer

	hub     *hubProcess
	spokes  []*simSpoke
	clients []*client
	changes changes
	wire    WireBytes
	subs    map[int][]int32 // service → gRPC and Envoy clients calling it
	res     Result
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "%s %-8s ", time.Now().Format("15:04:05.000"), r.server)
	fmt.Fprintf(r.out, format+"\n", args...)
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		for _, s := range r.spokes {
			s.close()
		}
		for _, c := range r.clients {
			if c.conn != nil {
				_ = c.conn.Close()
			}
		}
		if r.hub != nil {
			_ = r.hub.stop()
		}
	}()
	mix := r.cfg.Clients
	if r.server == ServerBaseline && mix.Ztunnel > 0 {
		r.logf("the baseline serves no workload API: its run has no ztunnel clients")
		mix.Ztunnel = 0
	}
	r.res = Result{Server: r.server, Clients: mix}

	var err error
	if r.hub, err = newHubProcess(r.server, r.cfg.Binary, r.logDir); err != nil {
		return nil, err
	}
	r.hub.env = r.cfg.HubEnv
	if err := r.hub.start(ctx, r.cfg.Timeout); err != nil {
		return nil, err
	}
	idle, err := r.hub.usage(ctx, true)
	if err != nil {
		return nil, err
	}

	// Spokes.
	start := time.Now()
	quiet := slog.New(slog.DiscardHandler)
	for c := range r.w.clusters {
		s, err := newSimSpoke(r.w, c, r.hub.federation, quiet)
		if err != nil {
			return nil, err
		}
		r.spokes = append(r.spokes, s)
		wg.Go(func() { _ = s.run(ctx) })
	}
	if err := r.awaitSpokes(ctx); err != nil {
		return nil, err
	}
	r.res.SpokeSyncSeconds = time.Since(start).Seconds()
	synced, err := r.hub.usage(ctx, true)
	if err != nil {
		return nil, err
	}
	r.logf("%d spokes synced %d endpoints in %.2fs; hub heap %.1f MiB (%.1f MiB of objects)", r.w.clusters, r.w.clusters*r.w.endpoints,
		r.res.SpokeSyncSeconds, synced.heap/mib, synced.live/mib)
	if dir := r.cfg.ProfileDir; dir != "" {
		path := filepath.Join(dir, r.server+"-heap-synced.pprof")
		if err := r.hub.saveProfile(ctx, "heap", path); err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
		r.logf("heap profile with every spoke synced, before any client: %s", path)
	}

	// Clients: gRPC and Envoy first, then ztunnels, so that the hub's heap
	// per client of each sort shows.
	start = time.Now()
	r.subs = map[int][]int32{}
	// Each sort in two halves: the first half's heap includes what their
	// views need built once (encoded resources every client of a view
	// shares); the second half's is what each more client costs.
	type batch struct {
		kind string
		n    int
	}
	half := func(kind string, n int) (batch, batch) { return batch{kind, n / 2}, batch{kind, n - n/2} }
	g1, g2 := half(kindGRPC, mix.GRPC)
	e1, e2 := half(kindEnvoy, mix.Envoy)
	z1, z2 := half(kindZtunnel, mix.Ztunnel)
	phases := [][]batch{{g1, e1}, {g2, e2}, {z1}, {z2}}
	heaps := []float64{synced.heap}
	for _, phase := range phases {
		for _, k := range phase {
			for range k.n {
				c := newClient(r.w, len(r.clients), k.kind, &r.changes, &r.wire)
				if err := c.dial(r.hub.xds); err != nil {
					return nil, err
				}
				r.clients = append(r.clients, c)
				for _, g := range c.services {
					r.subs[g] = append(r.subs[g], c.index)
				}
				wg.Go(func() { c.run(ctx) })
			}
		}
		if _, err := r.awaitClients(ctx, nil, "the initial sync"); err != nil {
			return nil, err
		}
		u, err := r.hub.usage(ctx, true)
		if err != nil {
			return nil, err
		}
		heaps = append(heaps, u.heap)
	}
	r.res.ClientSyncSeconds = time.Since(start).Seconds()
	withClients := heaps[4]
	if n := g2.n + e2.n; n > 0 {
		r.res.HeapPerClient = (heaps[2] - heaps[1]) / float64(n)
		r.res.HeapFirstClients = heaps[1] - heaps[0]
	}
	if z2.n > 0 {
		r.res.HeapPerZtunnel = (heaps[4] - heaps[3]) / float64(z2.n)
		r.res.HeapFirstZtunnels = heaps[3] - heaps[2]
	}
	r.logf("%d clients synced in %.2fs; hub heap %.1f MiB", len(r.clients), r.res.ClientSyncSeconds, withClients/mib)

	if dir := r.cfg.ProfileDir; dir != "" {
		path := filepath.Join(dir, r.server+"-heap.pprof")
		if err := r.hub.saveProfile(ctx, "heap", path); err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
		r.logf("heap profile with every client connected: %s", path)
		path = filepath.Join(dir, r.server+"-cpu.pprof")
		seconds := max(int(r.cfg.Duration.Seconds()), 1)
		wg.Go(func() {
			if err := r.hub.saveProfile(ctx, "profile?seconds="+strconv.Itoa(seconds), path); err != nil {
				r.logf("CPU profile: %v", err)
				return
			}
			r.logf("CPU profile of the churn: %s", path)
		})
	}

	// Churn.
	before, err := r.hub.usage(ctx, false)
	if err != nil {
		return nil, err
	}
	spokeBytes0, wire0 := r.spokeBytes(), r.wire.Load()
	hist0, _ := r.hub.histogram(ctx, propagationMetric)
	n, err := r.churn(ctx)
	if err != nil {
		return nil, err
	}
	r.awaitStragglers(ctx)
	if hist1, err := r.hub.histogram(ctx, propagationMetric); err == nil {
		if p50, pairs, ok := quantile(0.5, hist0, hist1); ok {
			p99, _, _ := quantile(0.99, hist0, hist1)
			r.res.HubPropagation = percentiles{P50: 1000 * p50, P99: 1000 * p99}
			r.res.HubPairs = int(pairs)
		}
	}
	if dir := r.cfg.ProfileDir; dir != "" {
		// With the one before the churn as -base: what the churn allocated.
		path := filepath.Join(dir, r.server+"-heap-after-churn.pprof")
		if err := r.hub.saveProfile(ctx, "heap", path); err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
		r.logf("heap profile after the churn: %s", path)
	}
	after, err := r.hub.usage(ctx, false)
	if err != nil {
		return nil, err
	}
	r.res.Changes = n
	r.res.Latency = r.changes.latencies(func(i int32) []string {
		if k := r.clients[i].kind; k != kindZtunnel {
			return []string{groupAll, groupXDS, k}
		}
		return []string{groupAll, kindZtunnel}
	})
	r.res.Missed = r.changes.missed()
	fn := float64(n)
	r.res.CPUPerChangeMillis = ms(after.cpu-before.cpu) / fn
	r.res.EncodesPerChange = (after.encodes - before.encodes) / fn
	r.res.SpokeBytesPerChange = float64(r.spokeBytes()-spokeBytes0) / fn
	r.res.ClientBytesPerChange = float64(r.wire.Load()-wire0) / fn
	r.res.HeapIdleBytes, r.res.HeapSyncedBytes, r.res.HeapClientsBytes = idle.heap, synced.heap, withClients
	r.res.HeapSyncedLiveBytes = synced.live
	r.res.RSSBytes = after.rss
	r.res.RSSSyncedBytes = synced.rss
	r.res.RSSPerEndpoint = (synced.rss - idle.rss) / float64(r.w.clusters*r.w.endpoints)
	r.res.HeapPerEndpoint = (synced.heap - idle.heap) / float64(r.w.clusters*r.w.endpoints)
	l := r.res.Latency[groupAll]
	r.logf("%d changes: p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d pairs (%d missed); hub CPU %.2f ms/change",
		n, l.Millis.P50, l.Millis.P99, l.Millis.Max, l.Pairs, r.res.Missed, r.res.CPUPerChangeMillis)

	if r.cfg.Restart {
		if err := r.restart(ctx); err != nil {
			return nil, err
		}
	}
	return &r.res, nil
}

const mib = 1 << 20

// propagationMetric is the hub's own end-to-end propagation histogram.
const propagationMetric = "meshfed_propagation_seconds"

// Latency groups besides the client kinds.
const (
	groupAll = "all"
	groupXDS = "xds" // gRPC and Envoy clients: those the baseline serves too
)

func (r *runner) spokeBytes() int64 {
	var n int64
	for _, s := range r.spokes {
		n += s.uplink.Status().BytesSent
	}
	return n
}

// awaitSpokes waits until the hub holds every cluster's full shard and is
// ready to serve proxies.
func (r *runner) awaitSpokes(ctx context.Context) error {
	var last string
	return r.poll(ctx, "the spokes' sync", func() (bool, error) {
		body, err := r.hub.get(ctx, "/debug/clusters")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		var resp debug.ClustersResponse
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			return false, err
		}
		done := 0
		for _, c := range resp.Clusters {
			if c.Connected && c.Endpoints == r.w.endpoints && c.Workloads == r.w.endpoints {
				done++
			}
		}
		last = fmt.Sprintf("%d of %d clusters synced", done, r.w.clusters)
		if done < r.w.clusters {
			return false, nil
		}
		// Ready: warm, and the first push made (its encodings are part of
		// what the hub holds per endpoint).
		if _, err := r.hub.get(ctx, "/readyz"); err != nil {
			last = "every cluster synced; the hub not ready yet: " + err.Error()
			return false, nil
		}
		return true, nil
	}, func() string { return last })
}

// awaitClients waits until every client has the full state on a stream
// newer than after[i] (nil: any), and returns when the last got it.
func (r *runner) awaitClients(ctx context.Context, after []int64, what string) (time.Time, error) {
	var last time.Time
	err := r.poll(ctx, what, func() (bool, error) {
		last = time.Time{}
		for i, c := range r.clients {
			s := c.converged.Load()
			if s == 0 || after != nil && s <= after[i] {
				return false, nil
			}
			if at := time.Unix(0, c.at.Load()); at.After(last) {
				last = at
			}
		}
		return true, nil
	}, func() string {
		n := 0
		for i, c := range r.clients {
			if s := c.converged.Load(); s != 0 && (after == nil || s > after[i]) {
				n++
			}
		}
		return fmt.Sprintf("%d of %d clients have the full state", n, len(r.clients))
	})
	return last, err
}

// poll checks cond every 20 ms until it holds, printing a progress line
// every second, for at most the configured timeout.
func (r *runner) poll(ctx context.Context, what string, cond func() (bool, error), status func() string) error {
	start := time.Now()
	deadline := start.Add(r.cfg.Timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastLine := start
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("waiting for %s: %s after %v (hub log: %s)", what, status(), r.cfg.Timeout, r.hub.logPath)
		}
		if now.Sub(lastLine) >= time.Second {
			lastLine = now
			r.logf("waiting for %s: %s", what, status())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// churn makes Rate changes per second for Duration, spread over the
// clusters, and returns how many it made.
func (r *runner) churn(ctx context.Context) (int, error) {
	start := time.Now()
	total := int(r.cfg.Rate * r.cfg.Duration.Seconds())
	interval := time.Duration(float64(time.Second) / r.cfg.Rate)
	next := start
	lastLine := start
	for n := range total {
		if wait := time.Until(next); wait > 0 && !pause(ctx, wait) {
			return n, ctx.Err()
		}
		next = next.Add(interval)
		c := n % r.w.clusters
		s := r.spokes[c]
		i := (n / r.w.clusters) % r.w.endpoints
		g := s.pods[i].service
		ch := &change{
			id: n, service: g, address: churnAddress(n), want: len(r.subs[g]) + r.res.Clients.Ztunnel, observed: time.Now(),
		}
		r.changes.add(ch)
		if err := s.replace(i, ch.address, fmt.Sprintf("%s-churn-%07d", clusterID(c), n), ch.observed); err != nil {
			return n, err
		}
		if now := time.Now(); now.Sub(lastLine) >= time.Second {
			lastLine = now
			r.logf("churn: %d of %d changes, %d not yet seen by every client", n+1, total, r.changes.pending())
		}
	}
	return total, nil
}

// awaitStragglers waits until every change has reached every client, or
// for the timeout: what is still unseen then counts as missed.
func (r *runner) awaitStragglers(ctx context.Context) {
	err := r.poll(ctx, "the last changes", func() (bool, error) { return r.changes.pending() == 0, nil },
		func() string { return fmt.Sprintf("%d changes not yet seen by every client", r.changes.pending()) })
	if err != nil {
		r.logf("%v", err)
	}
}

// restart SIGKILLs and restarts the hub and measures how long until
// every client has the full state again, and how many responses
// meanwhile lacked part of it.
func (r *runner) restart(ctx context.Context) error {
	gen := make([]int64, len(r.clients))
	var partial0 int64
	for i, c := range r.clients {
		gen[i] = c.streams.Load()
		partial0 += c.partial.Load()
	}
	if err := r.hub.kill(); err != nil {
		return fmt.Errorf("killing the hub: %w", err)
	}
	start := time.Now()
	if err := r.hub.start(ctx, r.cfg.Timeout); err != nil {
		return err
	}
	var profiling sync.WaitGroup
	defer profiling.Wait()
	if dir := r.cfg.ProfileDir; dir != "" {
		// The restarted hub's first 10 s: warm-up, first push, clients' syncs.
		path := filepath.Join(dir, r.server+"-restart-cpu.pprof")
		profiling.Go(func() {
			if err := r.hub.saveProfile(ctx, "profile?seconds=10", path); err != nil {
				r.logf("restart CPU profile: %v", err)
				return
			}
			r.logf("CPU profile of the restart: %s", path)
		})
		// The harness shares the machine with the hub: its spokes resend
		// their state and its clients decode the hub's first responses,
		// so its own profile says how much of the restart is its work.
		stop, err := profileSelf(filepath.Join(dir, r.server+"-restart-harness-cpu.pprof"))
		if err != nil {
			return err
		}
		defer stop()
	}
	last, err := r.awaitClients(ctx, gen, "convergence after a hub restart")
	if err != nil {
		return err
	}
	r.res.RestartSeconds = last.Sub(start).Seconds()
	for _, c := range r.clients {
		r.res.RestartPartial += c.partial.Load()
	}
	r.res.RestartPartial -= partial0
	r.logf("hub SIGKILLed and restarted: every client had the full state again after %.2fs; %d partial EDS responses",
		r.res.RestartSeconds, r.res.RestartPartial)
	return nil
}

// profileSelf writes this process's CPU profile to path until stop.
func profileSelf(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("profiling the harness: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// pause waits for d, or until ctx ends; it reports whether it waited all
// of d.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
