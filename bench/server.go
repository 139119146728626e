package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hubProcess is the server under test, run as its own process so that its
// CPU time and memory are its own: `meshfed hub`, or the baseline.
type hubProcess struct {
	kind                       string
	binary                     string
	env                        []string // added to the process's environment
	federation, xds, debugAddr string
	logPath                    string

	cmd    *exec.Cmd
	exited chan error
}

func newHubProcess(kind, binary, logDir string) (*hubProcess, error) {
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, err
	}
	return &hubProcess{
		kind: kind, binary: binary, federation: addrs[0], xds: addrs[1], debugAddr: addrs[2],
		logPath: logDir + "/" + kind + "-hub.log",
	}, nil
}

// freeAddrs returns n loopback addresses free at the time of the call.
func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		out = append(out, lis.Addr().String())
		defer func() { _ = lis.Close() }()
	}
	return out, nil
}

func (h *hubProcess) args() []string {
	common := []string{
		"--federation-addr", h.federation, "--xds-addr", h.xds, "--debug-addr", h.debugAddr,
		"--insecure", "--log-level", "info",
		// The simulated spokes start with the hub and name no members, so
		// the first warm-up runs to its limit; restarts end it as soon as
		// every member is back.
		"--xds-warmup", "2s",
	}
	if h.kind == ServerBaseline {
		return append([]string{"bench", "baseline-hub"}, common...)
	}
	// Its ztunnel clients connect to the hub itself.
	return append([]string{"hub", "--xds-workload-api"}, common...)
}

// start runs the process and waits until it serves.
func (h *hubProcess) start(ctx context.Context, timeout time.Duration) error {
	logFile, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	h.cmd = exec.Command(h.binary, h.args()...)
	h.cmd.Env = append(os.Environ(), h.env...)
	h.cmd.Stdout, h.cmd.Stderr = logFile, logFile
	if err := h.cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("%s hub: %w", h.kind, err)
	}
	h.exited = make(chan error, 1)
	go func() {
		h.exited <- h.cmd.Wait()
		_ = logFile.Close()
	}()
	deadline := time.Now().Add(timeout)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if _, err := h.get(ctx, "/healthz"); err == nil {
			return nil
		}
		select {
		case err := <-h.exited:
			h.exited <- err
			return fmt.Errorf("%s hub exited: %w (log: %s)", h.kind, err, h.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-poll.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s hub not serving after %v (log: %s)", h.kind, timeout, h.logPath)
		}
	}
}

// stop ends the process (SIGTERM, then SIGKILL) and waits for it.
func (h *hubProcess) stop() error {
	if h.cmd == nil || h.cmd.Process == nil {
		return nil
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	grace := time.NewTimer(10 * time.Second)
	defer grace.Stop()
	select {
	case err := <-h.exited:
		return exitErr(err)
	case <-grace.C:
		_ = h.cmd.Process.Kill()
		return exitErr(<-h.exited)
	}
}

// kill ends the process with SIGKILL, as a node failure or an OOM kill
// does (no graceful stop), and waits for it.
func (h *hubProcess) kill() error {
	if h.cmd == nil || h.cmd.Process == nil {
		return nil
	}
	_ = h.cmd.Process.Kill()
	return exitErr(<-h.exited)
}

func exitErr(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled() {
		return nil
	}
	return err
}

func (h *hubProcess) get(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.debugAddr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(body), nil
}

// metrics reads the process's unlabelled metrics (Prometheus text format).
func (h *hubProcess) metrics(ctx context.Context) (map[string]float64, error) {
	body, err := h.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// usage is a reading of the process's resources.
type usage struct {
	cpu       time.Duration
	heap, rss float64 // bytes; heap is after a forced GC
	live      float64 // go_memstats_heap_alloc_bytes: the objects within heap
	encodes   float64 // meshfed_xds_resource_encodes_total, when the server counts encodes
	sampledAt time.Time
}

// usage forces a GC (through the heap profile endpoint) when gc is set,
// then reads the process's metrics.
func (h *hubProcess) usage(ctx context.Context, gc bool) (usage, error) {
	for i := 0; gc && i < 2; i++ { // twice: what sits in a sync.Pool survives one GC
		if _, err := h.get(ctx, "/debug/pprof/heap?gc=1"); err != nil {
			return usage{}, err
		}
	}
	m, err := h.metrics(ctx)
	if err != nil {
		return usage{}, err
	}
	return usage{
		cpu:       time.Duration(m["process_cpu_seconds_total"] * float64(time.Second)),
		heap:      m["go_memstats_heap_inuse_bytes"],
		live:      m["go_memstats_heap_alloc_bytes"],
		rss:       m["process_resident_memory_bytes"],
		encodes:   m["meshfed_xds_resource_encodes_total"],
		sampledAt: time.Now(),
	}, nil
}

// saveProfile writes a profile from the hub's /debug/pprof to path.
func (h *hubProcess) saveProfile(ctx context.Context, query, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.debugAddr+"/debug/pprof/"+query, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/%s: %s", query, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// histogram reads a histogram's cumulative bucket counts from the
// process's metrics, every series summed, by upper bound.
func (h *hubProcess) histogram(ctx context.Context, name string) (map[float64]float64, error) {
	body, err := h.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[float64]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"_bucket{") {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.LastIndex(line, " ")
		if i < 0 || j < i {
			continue
		}
		leStr, _, _ := strings.Cut(line[i+4:], `"`)
		le, err := strconv.ParseFloat(leStr, 64) // "+Inf" parses too
		if err != nil {
			continue
		}
		if v, err := strconv.ParseFloat(line[j+1:], 64); err == nil {
			out[le] += v
		}
	}
	return out, sc.Err()
}

// quantile estimates the q-quantile of the observations between two
// readings of a histogram, as Prometheus's histogram_quantile does
// (linear within the bucket); ok is false when there are none.
func quantile(q float64, before, after map[float64]float64) (v float64, n float64, ok bool) {
	les := make([]float64, 0, len(after))
	for le := range after {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 {
		return 0, 0, false
	}
	total := after[les[len(les)-1]] - before[les[len(les)-1]]
	if total <= 0 {
		return 0, 0, false
	}
	rank, prevLE, prevCount := q*total, 0.0, 0.0
	for _, le := range les {
		c := after[le] - before[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevLE, total, true
			}
			if c == prevCount {
				return le, total, true
			}
			return prevLE + (le-prevLE)*(rank-prevCount)/(c-prevCount), total, true
		}
		prevLE, prevCount = le, c
	}
	return prevLE, total, true
}
