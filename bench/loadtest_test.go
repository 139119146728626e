package bench

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWorldExportsEveryServiceFromReplicasClusters(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clusters, cfg.Services, cfg.Endpoints, cfg.Replicas = 6, 4, 12, 3
	w, err := newWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if w.services != 8 || w.perService != 3 {
		t.Fatalf("services %d, per service %d; want 8 and 3", w.services, w.perService)
	}
	clustersOf := map[int]map[int]bool{}
	addresses := map[string]bool{}
	for c := range w.clusters {
		if got := w.exportsOf(c); len(got) != w.perCluster {
			t.Errorf("cluster %d exports %v, want %d services", c, got, w.perCluster)
		}
		pods := w.initialPods(c)
		if len(pods) != w.endpoints {
			t.Errorf("cluster %d has %d pods, want %d", c, len(pods), w.endpoints)
		}
		for _, p := range pods {
			if clustersOf[p.service] == nil {
				clustersOf[p.service] = map[int]bool{}
			}
			clustersOf[p.service][c] = true
			if addresses[p.address] {
				t.Errorf("address %s used twice", p.address)
			}
			addresses[p.address] = true
		}
	}
	for g := range w.services {
		if len(clustersOf[g]) != w.replicas {
			t.Errorf("service %d is in clusters %v, want %d distinct", g, clustersOf[g], w.replicas)
		}
	}
	for n := range 70_000 {
		if a := churnAddress(n); addresses[a] {
			t.Fatalf("churn address %s of change %d is used twice", a, n)
		} else {
			addresses[a] = true
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"endpoints not a multiple of services", func(c *Config) { c.Endpoints = 1001 }, "endpoints"},
		{"replicas above clusters", func(c *Config) { c.Replicas = 101 }, "replicas"},
		{"no clients", func(c *Config) { c.Clients = Mix{} }, "clients"},
		{"unknown server", func(c *Config) { c.Servers = []string{"istiod"} }, `unknown "istiod"`},
		{"too many changes", func(c *Config) { c.Duration = 10 * time.Hour }, "rate × duration"},
		{"no binary", func(c *Config) { c.Binary = "" }, "binary"},
		{"hub environment", func(c *Config) { c.HubEnv = []string{"GOGC"} }, "KEY=VALUE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Binary = "meshfed"
			tt.edit(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error about %s", err, tt.want)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.Binary = "meshfed"
	if err := cfg.Validate(); err != nil {
		t.Errorf("the default config: %v", err)
	}
}

func TestHostOf(t *testing.T) {
	for name, want := range map[string]string{
		"outbound|8080||svc-0001.bench.svc.cluster.local": "svc-0001.bench.svc.cluster.local",
		"svc-0001.bench.svc.cluster.local:8080":           "svc-0001.bench.svc.cluster.local",
		"nonsense":                                        "",
	} {
		if got := hostOf(name); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestRun runs the whole harness small: real hub processes (meshfed's and
// the baseline's), real spokes' uplinks, clients of every kind, churn and a
// restart. It checks that every change reached every client that should
// see it, on both servers, and that the report carries every figure.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meshfed and runs two hubs")
	}
	bin := filepath.Join(t.TempDir(), "meshfed")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/meshfed/meshfed/cmd/meshfed").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// 100 endpoints per cluster: enough that the heap they take stands out
	// of the heap's noise between two measurements (tens of KB).
	cfg := Config{
		Clusters: 3, Services: 2, Endpoints: 100, Replicas: 2,
		Clients:       Mix{GRPC: 4, Envoy: 3, Ztunnel: 2},
		Subscriptions: 2, Rate: 40, Duration: time.Second,
		Servers: []string{ServerMeshfed, ServerBaseline}, Restart: true, Binary: bin, Timeout: 30 * time.Second,
	}
	var progress bytes.Buffer
	rep, err := Run(t.Context(), cfg, t.TempDir(), &progress)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	for _, r := range rep.Results {
		ztunnels := cfg.Clients.Ztunnel
		if r.Server == ServerBaseline {
			ztunnels = 0
		}
		if r.Changes != 40 || r.Missed != 0 {
			t.Errorf("%s: %d changes, %d pairs missed; want 40 and 0", r.Server, r.Changes, r.Missed)
		}
		// Every change reaches each ztunnel, and the clients calling its service.
		if got, min := r.Latency[groupAll].Pairs, 40*ztunnels; got < min || r.Latency[groupXDS].Pairs == 0 {
			t.Errorf("%s: %d pairs (%d of gRPC and Envoy clients), want at least %d", r.Server, got, r.Latency[groupXDS].Pairs, min)
		}
		if r.Latency[groupAll].P99 <= 0 || r.CPUPerChangeMillis <= 0 || r.ClientBytesPerChange <= 0 || r.SpokeBytesPerChange <= 0 ||
			r.HeapPerEndpoint <= 0 || r.RSSBytes <= 0 || r.RestartSeconds <= 0 {
			t.Errorf("%s: a figure is missing: %+v", r.Server, r)
		}
	}
	// The hub's own measure of propagation (to each proxy's ACK) agrees
	// with the harness's (to each client's receipt): the same order of
	// magnitude, p50 below p99.
	if m := rep.Results[0]; m.HubPairs == 0 || m.HubPropagation.P50 <= 0 || m.HubPropagation.P50 > m.HubPropagation.P99 {
		t.Errorf("meshfed: the hub measured %d propagations, p50 %.2f ms, p99 %.2f ms", m.HubPairs, m.HubPropagation.P50, m.HubPropagation.P99)
	} else if ratio := m.HubPropagation.P50 / m.Latency[groupAll].Millis.P50; ratio < 0.1 || ratio > 10 {
		t.Errorf("meshfed: the hub's p50 %.2f ms is %.2f× the harness's %.2f ms", m.HubPropagation.P50, ratio, m.Latency[groupAll].Millis.P50)
	}
	if m := rep.Results[0]; m.EncodesPerChange <= 0 || m.Latency[kindZtunnel].Pairs != 40*cfg.Clients.Ztunnel {
		t.Errorf("meshfed: %.1f encodes per change, %d ztunnel pairs; want some and %d", m.EncodesPerChange, m.Latency[kindZtunnel].Pairs, 40*cfg.Clients.Ztunnel)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"baseline ÷ meshfed", "propagation p99, gRPC + Envoy", "converged after hub restart"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	b, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Results) != 2 || back.Results[0].Latency[groupAll].Millis.P99 <= 0 {
		t.Errorf("JSON round trip: %v\n%s", err, b)
	}
}
