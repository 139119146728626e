package images

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshfed/meshfed/internal/testwait"
)

// runBinaries runs the binaries unpacked from the images as a container
// runtime runs the images: from their own root file system, in its working
// directory /, with no environment (the images set none), and with the
// charts' arguments, which start with the subcommand.
func runBinaries(t *testing.T, hubRoot, spokeRoot string) {
	t.Helper()
	hub := filepath.Join(hubRoot, "meshfed-hub")
	spoke := filepath.Join(spokeRoot, "meshfed-spoke")
	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{hub, []string{"--version"}, "meshfed-hub " + testVersion + " (" + testRevision + ", go"},
		{hub, []string{"hub", "version"}, "meshfed-hub " + testVersion + " (" + testRevision + ", go"},
		{spoke, []string{"--version"}, "meshfed-spoke " + testVersion + " (" + testRevision + ", go"},
		{spoke, []string{"spoke", "version"}, "meshfed-spoke " + testVersion + " (" + testRevision + ", go"},
	} {
		out, err := command(t, c.bin, c.args...).Output()
		if err != nil || !strings.HasPrefix(string(out), c.want) {
			t.Errorf("%s %q: %q, %v; want %q...", filepath.Base(c.bin), c.args, out, err, c.want)
		}
	}
	for _, args := range [][]string{{"-h"}, {"spoke", "-h"}} {
		cmd := command(t, spoke, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("meshfed-spoke %q: %v", args, err)
		}
		if !strings.Contains(stderr.String(), "Usage:\n  meshfed-spoke [flags]") || !strings.Contains(stderr.String(), "--cluster-id") {
			t.Errorf("meshfed-spoke %q printed no usage:\n%s", args, stderr.String())
		}
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	get := func(url string) (int, []byte) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	healthy := func(addr string) func() bool {
		return func() bool { code, _ := get("http://" + addr + "/healthz"); return code == http.StatusOK }
	}

	federation, hubDebug, spokeDebug := freeAddr(t), freeAddr(t), freeAddr(t)
	h := start(t, hub, "hub", "--insecure", "--federation-addr", federation, "--xds-addr", "127.0.0.1:0", "--debug-addr", hubDebug)
	waitFor(t, "the hub's /healthz", healthy(hubDebug), h)

	s := start(t, spoke, "spoke", "--insecure", "--manifests", t.TempDir(), "--hub", federation,
		"--cluster-id", "east", "--debug-addr", spokeDebug)
	waitFor(t, "the spoke's /healthz", healthy(spokeDebug), h, s)
	waitFor(t, "east connected in the hub's /debug/clusters", func() bool {
		code, body := get("http://" + hubDebug + "/debug/clusters")
		var clusters struct {
			Clusters []cluster `json:"clusters"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &clusters) != nil {
			return false
		}
		return slices.ContainsFunc(clusters.Clusters, func(c cluster) bool { return c.ID == "east" && c.Connected })
	}, h, s)

	// As the kubelet stops a pod: SIGTERM, and each exits cleanly.
	s.stop(t)
	h.stop(t)
}

// cluster is the part of a row of the hub's /debug/clusters the test reads.
type cluster struct {
	ID        string `json:"id"`
	Connected bool   `json:"connected"`
}

// command runs bin from the root file system it was unpacked into, with
// no environment.
func command(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = []string{}
	return cmd
}

// process is a running binary; its output goes to a file shown when the
// test fails.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed when Wait has returned err
	err    error
}

func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: filepath.Base(bin), log: filepath.Join(t.TempDir(), filepath.Base(bin)+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	p.cmd = command(t, bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // fails once it has exited
		<-p.exited
		if t.Failed() {
			out, _ := os.ReadFile(p.log)
			t.Logf("%s's output:\n%s", p.name, out)
		}
	})
	return p
}

// stop sends SIGTERM and wants the process to exit 0 within 30 seconds.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("%s exited on SIGTERM: %v", p.name, p.err)
		}
	case <-timer.C:
		t.Errorf("%s did not exit within 30s of SIGTERM", p.name)
	}
}

// waitFor polls cond until it holds, and fails the test after 30 seconds
// or as soon as one of procs exits.
func waitFor(t *testing.T, what string, cond func() bool, procs ...*process) {
	t.Helper()
	ok := testwait.Within(30*time.Second, func() (bool, string) {
		for _, p := range procs {
			select {
			case <-p.exited:
				t.Fatalf("waiting for %s: %s exited (%v)", what, p.name, p.err)
			default:
			}
		}
		return cond(), ""
	})
	if !ok {
		t.Fatalf("timed out after 30s waiting for %s", what)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	return lis.Addr().String()
}
