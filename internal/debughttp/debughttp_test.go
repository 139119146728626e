package debughttp

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeAddr is a listener address without binding one, such as a pod IP.
type fakeAddr string

func (fakeAddr) Network() string  { return "tcp" }
func (a fakeAddr) String() string { return string(a) }

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }

func TestRegisterPprof(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmdline bool
		method  string
		path    string
		code    int
		body    string
	}{
		{"index", false, http.MethodGet, "/debug/pprof/", http.StatusOK, "heap"},
		{"named profile with parameters", false, http.MethodGet, "/debug/pprof/heap?gc=1&debug=1", http.StatusOK, "heap profile"},
		{"goroutines", false, http.MethodGet, "/debug/pprof/goroutine?debug=1", http.StatusOK, "goroutine profile"},
		{"symbol", false, http.MethodGet, "/debug/pprof/symbol", http.StatusOK, "num_symbols"},
		{"cmdline off by default", false, http.MethodGet, "/debug/pprof/cmdline", http.StatusNotFound, "not served"},
		{"cmdline when asked for", true, http.MethodGet, "/debug/pprof/cmdline", http.StatusOK, os.Args[0]},
		{"unknown profile", false, http.MethodGet, "/debug/pprof/nope", http.StatusNotFound, "Unknown profile"},
		{"POST symbol", false, http.MethodPost, "/debug/pprof/symbol", http.StatusMethodNotAllowed, ""},
		{"POST index", false, http.MethodPost, "/debug/pprof/heap", http.StatusMethodNotAllowed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			RegisterPprof(mux, tc.cmdline)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), tc.method, tc.path, nil))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("%s %s: %d %.200q, want %d mentioning %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.code, tc.body)
			}
		})
	}
}

func TestHardenMethods(t *testing.T) {
	for _, tc := range []struct {
		method string
		code   int
	}{
		{http.MethodGet, http.StatusOK},
		{http.MethodHead, http.StatusOK},
		{http.MethodPost, http.StatusMethodNotAllowed},
		{http.MethodPut, http.StatusMethodNotAllowed},
		{http.MethodPatch, http.StatusMethodNotAllowed},
		{http.MethodDelete, http.StatusMethodNotAllowed},
		{http.MethodOptions, http.StatusMethodNotAllowed},
		{http.MethodConnect, http.StatusMethodNotAllowed},
		{http.MethodTrace, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.method, func(t *testing.T) {
			reached := false
			h := Harden(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true; ok(w, r) }),
				Options{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}})
			req := httptest.NewRequestWithContext(t.Context(), tc.method, "/debug/clusters", nil)
			req.Host = "127.0.0.1:8080"
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code || reached != (tc.code == http.StatusOK) {
				t.Errorf("%s: %d, handler reached %v; want %d", tc.method, rec.Code, reached, tc.code)
			}
			if tc.code == http.StatusMethodNotAllowed {
				if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
					t.Errorf("Allow %q, want %q", got, "GET, HEAD")
				}
			}
		})
	}
}

// TestHardenHosts is the Host decision for each kind of listener, and for
// a wildcard listener each kind of connection.
func TestHardenHosts(t *testing.T) {
	v4 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	v6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 8080}
	podIP := fakeAddr("10.1.2.3:8080")
	wildcard := &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}
	hosts := []string{"hub.internal", "Debug.Example.:9999"}
	for _, tc := range []struct {
		name     string
		listener net.Addr
		local    net.Addr // the connection's local address; nil: unknown
		host     string
		want     int
	}{
		{"loopback: evil name", v4, v4, "evil.example", http.StatusMisdirectedRequest},
		{"loopback: evil name with port", v4, v4, "evil.example:8080", http.StatusMisdirectedRequest},
		{"loopback: name that starts like localhost", v4, v4, "localhost.evil.example:8080", http.StatusMisdirectedRequest},
		{"loopback: name that starts like an address", v4, v4, "127.0.0.1.evil.example", http.StatusMisdirectedRequest},
		{"loopback: subdomain of a configured name", v4, v4, "x.hub.internal", http.StatusMisdirectedRequest},
		{"loopback: 127.0.0.1 with port", v4, v4, "127.0.0.1:8080", http.StatusOK},
		{"loopback: 127.0.0.1", v4, v4, "127.0.0.1", http.StatusOK},
		{"loopback: localhost with port", v4, v4, "localhost:8080", http.StatusOK},
		{"loopback: localhost", v4, v4, "LocalHost", http.StatusOK},
		{"loopback: localhost, fully qualified", v4, v4, "localhost.:8080", http.StatusOK},
		{"loopback: ::1", v6, v6, "[::1]:8080", http.StatusOK},
		{"loopback: other loopback address", other, other, "127.0.0.9:8080", http.StatusOK},
		{"loopback: pod IP kept by a forwarding proxy", v4, v4, "10.1.2.3:8080", http.StatusOK},
		{"loopback: configured name", v4, v4, "hub.internal:8080", http.StatusOK},
		{"loopback: configured name, other case and port", v4, v4, "HUB.internal:1234", http.StatusOK},
		{"loopback: configured name given with port", v4, v4, "debug.example", http.StatusOK},
		{"loopback: no Host (HTTP/1.0)", v4, v4, "", http.StatusOK},
		{"loopback listener, connection unknown", v4, nil, "evil.example", http.StatusMisdirectedRequest},
		{"listener named localhost", fakeAddr("localhost:8080"), nil, "evil.example", http.StatusMisdirectedRequest},
		{"listener on an IPv4-mapped loopback", fakeAddr("[::ffff:127.0.0.1]:8080"), nil, "evil.example", http.StatusMisdirectedRequest},
		{"pod IP: any name", podIP, nil, "evil.example:8080", http.StatusOK},
		{"pod IP: kubelet probe", podIP, nil, "10.1.2.3:8080", http.StatusOK},
		{"pod IP: service name", podIP, podIP, "meshfed-hub.meshfed-system.svc:8080", http.StatusOK},
		{"wildcard reached over the network", wildcard, podIP, "evil.example:8080", http.StatusOK},
		{"wildcard reached over loopback", wildcard, v4, "evil.example:8080", http.StatusMisdirectedRequest},
		{"wildcard reached over loopback: localhost", wildcard, v6, "localhost:8080", http.StatusOK},
		{"no listener given, reached over loopback", nil, v4, "evil.example", http.StatusMisdirectedRequest},
		{"no listener given, reached over the network", nil, podIP, "evil.example", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Harden(http.HandlerFunc(ok), Options{Addr: tc.listener, Hosts: hosts})
			ctx := t.Context()
			if tc.local != nil {
				ctx = context.WithValue(ctx, http.LocalAddrContextKey, tc.local)
			}
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/healthz", nil)
			req.Host = tc.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("Host %q: %d %q, want %d", tc.host, rec.Code, rec.Body.String(), tc.want)
			}
			if tc.want == http.StatusMisdirectedRequest && !strings.Contains(rec.Body.String(), "--debug-hosts") {
				t.Errorf("body %q does not say how to allow the name", rec.Body.String())
			}
		})
	}
}

// TestHardenLoopbackListener is the guard on a real loopback listener:
// the connection's addresses come from net/http, not from the test.
func TestHardenLoopbackListener(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/clusters", ok)
	RegisterPprof(mux, false)
	srv.Config.Handler = Harden(mux, Options{Addr: srv.Listener.Addr(), Hosts: []string{"hub.internal"}})
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, host, path string
		want               int
	}{
		{http.MethodGet, "evil.example:" + port, "/debug/clusters", http.StatusMisdirectedRequest},
		{http.MethodGet, "evil.example", "/debug/pprof/heap", http.StatusMisdirectedRequest},
		{http.MethodPost, "evil.example:" + port, "/debug/clusters", http.StatusMisdirectedRequest},
		{http.MethodGet, "127.0.0.1:" + port, "/debug/clusters", http.StatusOK},
		{http.MethodGet, "localhost:" + port, "/debug/clusters", http.StatusOK},
		{http.MethodGet, "hub.internal:" + port, "/debug/clusters", http.StatusOK},
		{http.MethodGet, "localhost:" + port, "/debug/pprof/heap?gc=1", http.StatusOK},
		{http.MethodGet, "localhost:" + port, "/debug/pprof/cmdline", http.StatusNotFound},
		{http.MethodPost, "127.0.0.1:" + port, "/debug/clusters", http.StatusMethodNotAllowed},
		{http.MethodPost, "127.0.0.1:" + port, "/debug/pprof/symbol", http.StatusMethodNotAllowed},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s Host %q: %s, want %d", tc.method, tc.path, tc.host, resp.Status, tc.want)
		}
	}
}

func TestParseHosts(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"hub.internal", []string{"hub.internal"}, ""},
		{" Hub.Internal. , meshfed-hub.meshfed-system.svc,,my_host ", []string{"hub.internal", "meshfed-hub.meshfed-system.svc", "my_host"}, ""},
		{"10.0.0.7,::1,[fe80::1]", []string{"10.0.0.7", "::1", "fe80::1"}, ""},
		{"hub.internal:8080", nil, "without a port"},
		{"[::1]:8080", nil, "without a port"},
		{"*.example.com", nil, "not a host name"},
		{"http://hub.internal", nil, "not a host name"},
		{"a..b", nil, "not a host name"},
		{"-a.example", nil, "not a host name"},
		{"hub internal", nil, "not a host name"},
	} {
		got, err := ParseHosts(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseHosts(%q): %v, want an error mentioning %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseHosts(%q): %v", tc.in, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseHosts(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}
