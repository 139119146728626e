package spoke

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
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

// TestServeDebugGuard: the spoke's debug port is read-only, hides its
// command line unless asked, and refuses foreign names over loopback.
func TestServeDebugGuard(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   debugOptions
		method string
		host   string // "": the listener's address; a trailing ":" takes its port
		path   string
		code   int
		body   string
	}{
		{"cmdline off by default", debugOptions{}, http.MethodGet, "", "/debug/pprof/cmdline", http.StatusNotFound, "not served"},
		{"cmdline when asked", debugOptions{cmdline: true}, http.MethodGet, "", "/debug/pprof/cmdline", http.StatusOK, os.Args[0]},
		{"POST metrics", debugOptions{}, http.MethodPost, "", "/metrics", http.StatusMethodNotAllowed, ""},
		{"POST symbol", debugOptions{}, http.MethodPost, "", "/debug/pprof/symbol", http.StatusMethodNotAllowed, ""},
		{"heap after a GC", debugOptions{}, http.MethodGet, "localhost:", "/debug/pprof/heap?gc=1", http.StatusOK, ""},
		{"kubelet probe", debugOptions{}, http.MethodGet, "10.0.0.7:", "/healthz", http.StatusOK, "ok"},
		{"rebinding page", debugOptions{}, http.MethodGet, "evil.example:", "/metrics", http.StatusMisdirectedRequest, "evil.example"},
		{"configured name", debugOptions{hosts: []string{"spoke.local"}}, http.MethodGet, "spoke.local:", "/metrics", http.StatusOK, ""},
		{"not ready", debugOptions{ready: func() bool { return false }}, http.MethodGet, "10.0.0.7:", "/readyz", http.StatusServiceUnavailable, "no hub has acknowledged"},
		{"ready", debugOptions{ready: func() bool { return true }}, http.MethodGet, "10.0.0.7:", "/readyz", http.StatusOK, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- serveDebugWith(ctx, lis, prometheus.NewRegistry(), tc.opts) }()
			client := &http.Client{Transport: &http.Transport{}}
			defer func() {
				client.CloseIdleConnections()
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serveDebugWith: %v", err)
				}
			}()
			req, err := http.NewRequestWithContext(t.Context(), tc.method, "http://"+lis.Addr().String()+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(tc.host, ":") {
				_, port, _ := net.SplitHostPort(lis.Addr().String())
				req.Host = tc.host + port
			} else if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.body) {
				t.Errorf("%s %s (Host %q): %s %.200q, want %d mentioning %q", tc.method, tc.path, req.Host, resp.Status, body, tc.code, tc.body)
			}
		})
	}
}

// TestSpokeMetrics: the spoke's registry has the uplink's metrics.
func TestSpokeMetrics(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Hub, cfg.Insecure, cfg.Manifests = "east", "n1", "127.0.0.1:1", true, t.TempDir()
	s, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
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
