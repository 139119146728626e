package charts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testwait"
)

// testHub is an in-process hub for the spokes to stream to.
type testHub struct {
	addr string
	reg  *registry.Registry
}

func startHub(t *testing.T) *testHub {
	t.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "", "127.0.0.1:0"
	h, err := hub.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	// t.Context ends before the cleanups run, and with it the hub.
	go func() { done <- h.Run(t.Context()) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	return &testHub{addr: h.FederationAddr().String(), reg: h.Registry()}
}

// hasEndpoint tells whether the hub has the cluster, connected, on its
// network, with addr among the endpoints it exports for service.
func (h *testHub) hasEndpoint(cluster federation.ClusterID, network federation.NetworkID, service, addr string) bool {
	if !slices.ContainsFunc(h.reg.Status(), func(s registry.ClusterStatus) bool { return s.ID == cluster && s.Connected }) {
		return false
	}
	s := h.reg.Current()
	if info, ok := s.Cluster(cluster); !ok || info.Network != network {
		return false
	}
	v, ok := s.Service(service)
	if !ok {
		return false
	}
	for _, c := range v.Clusters {
		if c.Cluster == cluster && slices.ContainsFunc(c.Endpoints, func(e clusterset.TaggedEndpoint) bool { return e.GetAddress() == addr }) {
			return true
		}
	}
	return false
}

// status returns the hub's status of a cluster (zero when it has none).
func (h *testHub) status(cluster federation.ClusterID) registry.ClusterStatus {
	for _, s := range h.reg.Status() {
		if s.ID == cluster {
			return s
		}
	}
	return registry.ClusterStatus{}
}

// spokeBinary builds cmd/meshfed-spoke, the binary the chart's image runs,
// once per test binary, into the repository's git-ignored cache.
func spokeBinary(t *testing.T) string {
	t.Helper()
	spokeBuild.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", ".cache", "charts"))
		if err != nil {
			errSpokeBuild = err
			return
		}
		spokeBin = filepath.Join(dir, "meshfed-spoke")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", spokeBin, "github.com/meshfed/meshfed/cmd/meshfed-spoke").CombinedOutput()
		if err != nil {
			errSpokeBuild = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if errSpokeBuild != nil {
		t.Fatal(errSpokeBuild)
	}
	return spokeBin
}

// spokeProcess is a running meshfed-spoke, killed when the test ends.
type spokeProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // how it exited, once done is closed
}

// startSpoke runs meshfed-spoke on the cluster of kubeconfig, with env
// added to the test's environment.
func startSpoke(t *testing.T, kubeconfig, hubAddr, clusterID string, env ...string) *spokeProcess {
	t.Helper()
	return startSpokeArgs(t, kubeconfig, hubAddr, clusterID, nil, env...)
}

// startSpokeArgs is startSpoke with further arguments.
func startSpokeArgs(t *testing.T, kubeconfig, hubAddr, clusterID string, args []string, env ...string) *spokeProcess {
	t.Helper()
	p := &spokeProcess{log: filepath.Join(t.TempDir(), "spoke.log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	// Debug logs show the Event writes the spoke retries; JSON keeps the
	// API server's error message intact for denied.
	cmd := exec.Command(spokeBinary(t), slices.Concat([]string{
		"--kubeconfig", kubeconfig,
		"--insecure", "--cluster-id", clusterID, "--network", "n1", "--hub", hubAddr, "--export", "exported",
		"--log-level", "debug", "--log-format", "json",
	}, args)...)
	p.cmd = cmd
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("spoke %s's log:\n%s", clusterID, p.tail())
		}
	})
	return p
}

func (p *spokeProcess) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 16<<10 {
		b = b[len(b)-16<<10:]
	}
	return string(b)
}

// logged tells whether the spoke has logged msg.
func (p *spokeProcess) logged(t *testing.T, msg string) bool {
	t.Helper()
	data, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		var rec struct{ Msg string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == msg {
			return true
		}
	}
	return false
}

// forbidden matches the API server's message for a request RBAC refuses.
var forbidden = regexp.MustCompile(`forbidden: User "[^"]+" cannot (\S+) resource "([^"]+)"`)

// denials returns the spoke's log lines that report a request the API
// server refused for want of permission.
func (p *spokeProcess) denials(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return denialsIn(data)
}

// denied returns the first log line where the API server refused the
// spoke verb on resource, or "".
func (p *spokeProcess) denied(t *testing.T, verb, resource string) string {
	t.Helper()
	return deniedIn(p.denials(t), verb, resource)
}

// denialsIn returns the lines of a JSON log whose err reports a request
// the API server refused for want of permission.
func denialsIn(log []byte) []string {
	var out []string
	for line := range bytes.Lines(log) {
		var rec struct{ Err string }
		if json.Unmarshal(line, &rec) != nil {
			continue // a line still being written
		}
		if forbidden.MatchString(rec.Err) {
			out = append(out, string(bytes.TrimSpace(line)))
		}
	}
	return out
}

// deniedIn returns the first of denials that refused verb on resource,
// or "".
func deniedIn(denials []string, verb, resource string) string {
	for _, line := range denials {
		var rec struct{ Err string }
		_ = json.Unmarshal([]byte(line), &rec)
		if m := forbidden.FindStringSubmatch(rec.Err); m[1] == verb && m[2] == resource {
			return line
		}
	}
	return ""
}

// eventually waits for cond while the spoke runs.
func (p *spokeProcess) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll(t, what, cond, p)
}

// poll calls cond until it holds, failing the test after waitLimit or
// when p, if set, exits.
func poll(t *testing.T, what string, cond func() bool, p *spokeProcess) {
	t.Helper()
	ok := testwait.Within(waitLimit, func() (bool, string) {
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("the spoke exited (%v) while waiting for %s", p.err, what)
			default:
			}
		}
		return cond(), ""
	})
	if !ok {
		t.Fatalf("waited %v for %s", waitLimit, what)
	}
}

var (
	spokeBuild    sync.Once
	spokeBin      string
	errSpokeBuild error
)
