package spoke

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestServeDebug(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	go func() { done <- serveDebug(ctx, lis, reg) }()
	for path, want := range map[string]string{"/healthz": "ok", "/debug/pprof/": "heap", "/metrics": "go_goroutines"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+lis.Addr().String()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("%s: %q does not mention %q", path, body, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serveDebug: %v", err)
	}
}

// TestSpokeMetrics: the spoke's registry has the uplink's metrics.
func TestSpokeMetrics(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Hub, cfg.Insecure, cfg.Manifests = "east", "n1", "127.0.0.1:1", true, t.TempDir()
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.hubs.open("127.0.0.1:1", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	want := `
# HELP meshfed_spoke_uplink_connected 1 while the hub has welcomed the spoke's current stream, 0 otherwise.
# TYPE meshfed_spoke_uplink_connected gauge
meshfed_spoke_uplink_connected{hub="127.0.0.1:1"} 0
`
	if err := testutil.GatherAndCompare(s.metrics, strings.NewReader(want), "meshfed_spoke_uplink_connected"); err != nil {
		t.Error(err)
	}
}
