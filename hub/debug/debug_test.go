package debug

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/hub/registry"
)

// debugServer serves the hub's debug port on a real loopback listener;
// handler builds it for the listener's address.
func debugServer(t *testing.T, handler func(net.Addr) http.Handler) (srv *httptest.Server, port string) {
	t.Helper()
	srv = httptest.NewUnstartedServer(nil)
	srv.Config.Handler = handler(srv.Listener.Addr())
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return srv, port
}

// call sends method path to srv with Host host ("": the listener's
// address) and returns the status code and body.
func call(t *testing.T, srv *httptest.Server, method, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestHandlerDefaults: with the zero Options the port is read-only, hides
// the command line and refuses foreign names over loopback, and probes
// and the load harness's requests still work.
func TestHandlerDefaults(t *testing.T) {
	extra := map[string]http.Handler{
		"GET /debug/proxies": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "proxies\n") }),
		// A pattern without a method: the port stays read-only anyway.
		"/debug/xds": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "xds\n") }),
	}
	srv, port := debugServer(t, func(net.Addr) http.Handler {
		return Handler(registry.New(registry.Config{}), prometheus.NewRegistry(), func() bool { return true }, extra)
	})
	for _, tc := range []struct {
		name, method, host, path string
		code                     int
		body                     string
	}{
		{"clusters", http.MethodGet, "", "/debug/clusters", http.StatusOK, `"clusters"`},
		{"services", http.MethodGet, "localhost:" + port, "/debug/services", http.StatusOK, `"revision"`},
		{"HEAD clusters", http.MethodHead, "", "/debug/clusters", http.StatusOK, ""},
		{"extra page", http.MethodGet, "", "/debug/proxies", http.StatusOK, "proxies"},
		{"POST clusters", http.MethodPost, "", "/debug/clusters", http.StatusMethodNotAllowed, "read-only"},
		{"DELETE services", http.MethodDelete, "", "/debug/services", http.StatusMethodNotAllowed, ""},
		{"POST to an extra page without a method", http.MethodPost, "", "/debug/xds", http.StatusMethodNotAllowed, ""},
		{"POST symbol", http.MethodPost, "", "/debug/pprof/symbol", http.StatusMethodNotAllowed, ""},
		{"cmdline", http.MethodGet, "", "/debug/pprof/cmdline", http.StatusNotFound, "not served"},
		{"heap after a GC", http.MethodGet, "", "/debug/pprof/heap?gc=1", http.StatusOK, ""},
		{"pprof index", http.MethodGet, "", "/debug/pprof/", http.StatusOK, "goroutine"},
		{"kubelet liveness probe", http.MethodGet, "10.0.0.7:" + port, "/healthz", http.StatusOK, "ok"},
		{"kubelet readiness probe", http.MethodGet, "10.0.0.7:" + port, "/readyz", http.StatusOK, "ok"},
		{"metrics", http.MethodGet, "[::1]:" + port, "/metrics", http.StatusOK, ""},
		{"rebinding page", http.MethodGet, "evil.example:" + port, "/debug/clusters", http.StatusMisdirectedRequest, "evil.example"},
		{"rebinding page, profiles", http.MethodGet, "evil.example", "/debug/pprof/heap", http.StatusMisdirectedRequest, ""},
		{"unconfigured name", http.MethodGet, "meshfed-hub.local:" + port, "/metrics", http.StatusMisdirectedRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(t, srv, tc.method, tc.host, tc.path)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("%s %s (Host %q): %d %.200q, want %d mentioning %q", tc.method, tc.path, tc.host, code, body, tc.code, tc.body)
			}
		})
	}
}

func TestHandlerOptions(t *testing.T) {
	srv, port := debugServer(t, func(addr net.Addr) http.Handler {
		return HandlerWithOptions(registry.New(registry.Config{}), prometheus.NewRegistry(), nil, nil,
			Options{Cmdline: true, Addr: addr, Hosts: []string{"meshfed-hub.local"}})
	})
	if code, body := call(t, srv, http.MethodGet, "", "/debug/pprof/cmdline"); code != http.StatusOK || !strings.Contains(body, os.Args[0]) {
		t.Errorf("cmdline: %d %q, want 200 with %q", code, body, os.Args[0])
	}
	if code, _ := call(t, srv, http.MethodGet, "meshfed-hub.local:"+port, "/debug/clusters"); code != http.StatusOK {
		t.Errorf("configured name: %d, want 200", code)
	}
	if code, _ := call(t, srv, http.MethodGet, "evil.example:"+port, "/debug/clusters"); code != http.StatusMisdirectedRequest {
		t.Errorf("other name: %d, want 421", code)
	}
}

func TestHealthz(t *testing.T) {
	var err error
	h := HandlerWithOptions(fixedSource{}, prometheus.NewRegistry(), nil, nil, Options{Healthy: func() error { return err }})
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://10.0.0.7:8080/healthz", nil))
		return rec
	}
	if rec := get(); rec.Code != http.StatusOK {
		t.Errorf("healthy: %d %s", rec.Code, rec.Body)
	}
	err = errors.New("the xDS push loop has not turned for 3m0s (more than 2m0s)")
	if rec := get(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "push loop has not turned") {
		t.Errorf("stuck: %d %s", rec.Code, rec.Body)
	}
}
