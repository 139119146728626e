package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/debug"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testlog"
)

// testHub is an in-process hub whose clusters the test connects through
// its registry, as ingest would for spokes.
type testHub struct {
	debugAddr string
	reg       *registry.Registry
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
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	return &testHub{debugAddr: h.DebugAddr().String(), reg: h.Registry()}
}

// join connects cluster id and applies its full state, a change its
// spoke observed lag before.
func (h *testHub) join(t *testing.T, id string, lag time.Duration) *registry.Conn {
	t.Helper()
	c := h.reg.Connect(federation.ClusterID(id), "v0.2.0")
	err := c.Apply("s-"+id, &federationpb.ShardUpdate{
		Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: id, Network: "network-" + id},
		ObservedTime: timestamppb.New(time.Now().Add(-lag)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// status runs meshfed status with args, as typed, and returns what it
// printed on stdout.
func status(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(t.Context(), append([]string{"status"}, args...), &out, io.Discard)
	return out.String(), err
}

// statusWith runs meshfed status with args, asking the hub every 10ms
// while it waits, until it returns; stderr gets what it says meanwhile.
func statusWith(ctx context.Context, t *testing.T, stdout, stderr io.Writer, args ...string) error {
	t.Helper()
	fs := flag.NewFlagSet("meshfed status", flag.ContinueOnError)
	o := statusFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	o.interval = 10 * time.Millisecond
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	return o.run(ctx, explicit, stdout, stderr)
}

// clustersOf decodes /debug/clusters as JSON objects, without the field
// that changes from one answer to the next (lastSeen: now, while the
// spoke is connected).
func clustersOf(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var body struct{ Clusters []map[string]any }
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("%v:\n%s", err, data)
	}
	for _, c := range body.Clusters {
		delete(c, "lastSeen")
	}
	return body.Clusters
}

// TestStatusOutputs: -o json and -o yaml print /debug/clusters as the
// hub serves it; the table has the new columns' values.
func TestStatusOutputs(t *testing.T) {
	h := startHub(t)
	defer h.join(t, "east", 250*time.Millisecond).Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+h.debugAddr+"/debug/clusters", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	served, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := clustersOf(t, served)
	if len(want) != 1 || want[0]["lastChangeAt"] == nil || want[0]["lastChangeObservedAt"] == nil {
		t.Fatalf("/debug/clusters: %s", served)
	}

	for _, format := range []string{"json", "yaml"} {
		for _, flagName := range []string{"-o", "--output"} {
			out, err := status(t, "--debug-addr", h.debugAddr, flagName, format)
			if err != nil {
				t.Fatal(err)
			}
			data := []byte(out)
			if format == "yaml" {
				if data, err = yaml.YAMLToJSON(data); err != nil {
					t.Fatalf("-o yaml printed no YAML: %v\n%s", err, out)
				}
			}
			if diff := cmp.Diff(want, clustersOf(t, data)); diff != "" {
				t.Errorf("%s %s differs from /debug/clusters (-want +got):\n%s", flagName, format, diff)
			}
		}
	}

	out, err := status(t, "--debug-addr", h.debugAddr)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "east ") {
		t.Fatalf("the table:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[len(f)-1] == "-" || !strings.HasSuffix(f[len(f)-1], "ms") {
		t.Errorf("LAG is %q, want the 250ms the change took", f[len(f)-1])
	}
}

// TestStatusWait: --wait waits until every cluster named is live and
// synced, saying on stderr what it waits for as that changes.
func TestStatusWait(t *testing.T) {
	h := startHub(t)
	var stdout, stderr testlog.Buffer
	done := make(chan error, 1)
	go func() {
		done <- statusWith(t.Context(), t, &stdout, &stderr, "--debug-addr", h.debugAddr, "--wait", "--clusters", "east,west", "--timeout", "1m")
	}()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			select {
			case err := <-done:
				t.Fatalf("status --wait returned (%v) while waiting for %s; stderr:\n%s", err, what, stderr.String())
			case <-deadline.C:
				t.Fatalf("waited 30s for %s; stderr:\n%s", what, stderr.String())
			case <-tick.C:
			}
		}
	}
	waitUntil("status to wait for both", func() bool {
		return strings.Contains(stderr.String(), "waiting: east (not known to the hub), west (not known to the hub)\n")
	})
	defer h.join(t, "east", 0).Close()
	waitUntil("status to wait for west alone", func() bool {
		return strings.Contains(stderr.String(), "waiting: west (not known to the hub)\n")
	})
	if stdout.String() != "" {
		t.Errorf("status printed before the clusters were ready:\n%s", stdout.String())
	}
	west := h.reg.Connect("west", "v0.2.0") // connected, no shard yet
	waitUntil("status to wait for west's shard", func() bool {
		return strings.Contains(stderr.String(), "waiting: west (connected; its shard has not arrived yet)\n")
	})
	defer west.Close()
	if err := west.Apply("s", &federationpb.ShardUpdate{Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: "west", Network: "n2"}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("status --wait: %v", err)
	}
	if out := stdout.String(); !strings.Contains(out, "\neast ") || !strings.Contains(out, "\nwest ") {
		t.Errorf("status --wait printed:\n%s", out)
	}
}

// TestStatusWaitTimesOut: a cluster that never comes fails --wait once
// --timeout is up, with the last status and a message naming it.
func TestStatusWaitTimesOut(t *testing.T) {
	h := startHub(t)
	defer h.join(t, "east", 0).Close()
	var stdout bytes.Buffer
	err := statusWith(t.Context(), t, &stdout, io.Discard, "--debug-addr", h.debugAddr, "--wait", "--clusters", "east,north", "--timeout", "200ms")
	if want := "timed out after 200ms; not live and synced: north (not known to the hub)"; err == nil || err.Error() != want {
		t.Errorf("status --wait = %v, want %q", err, want)
	}
	if !strings.Contains(stdout.String(), "\neast ") {
		t.Errorf("no last status printed:\n%s", stdout.String())
	}
}

// TestStatusWaitAtTheDeadline: an attempt that fails between the
// deadline and the moment the context's timer fires (client-go's rate
// limiter refuses to wait past a deadline on its own) does not replace
// what the attempts before it found out.
func TestStatusWaitAtTheDeadline(t *testing.T) {
	ctx := newRacingDeadline(t.Context())
	attempts := 0
	connect := func(context.Context) (*hubConn, error) {
		attempts++
		if attempts == 1 {
			return nil, errors.New("no pod in namespace meshfed matches app.kubernetes.io/name=meshfed-hub")
		}
		ctx.pass()
		return nil, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
	}
	err := waitForClusters(ctx, connect, nil, time.Millisecond, time.Second, func(*hubStatus) error { return nil }, io.Discard)
	if want := "timed out after 1s: no pod in namespace meshfed matches app.kubernetes.io/name=meshfed-hub"; err == nil || err.Error() != want {
		t.Errorf("status --wait = %v, want %q", err, want)
	}

	// When no attempt finished before the deadline, the one it cut short
	// is all there is to say.
	ctx = newRacingDeadline(t.Context())
	connect = func(context.Context) (*hubConn, error) {
		ctx.pass()
		return nil, errors.New("list the hub's pods: rate: Wait(n=1) would exceed context deadline")
	}
	err = waitForClusters(ctx, connect, nil, time.Millisecond, time.Second, func(*hubStatus) error { return nil }, io.Discard)
	if want := "timed out after 1s: list the hub's pods: rate: Wait(n=1) would exceed context deadline"; err == nil || err.Error() != want {
		t.Errorf("status --wait = %v, want %q", err, want)
	}
}

// racingDeadline is a context whose deadline has passed (pass) while it
// is not done yet, as a real one's is until its timer runs: here, until
// the next time someone waits on Done.
type racingDeadline struct {
	context.Context
	cancel   context.CancelFunc
	deadline atomic.Pointer[time.Time]
	passed   atomic.Bool
}

func newRacingDeadline(parent context.Context) *racingDeadline {
	ctx, cancel := context.WithCancel(parent)
	r := &racingDeadline{Context: ctx, cancel: cancel}
	later := time.Now().Add(time.Hour)
	r.deadline.Store(&later)
	return r
}

func (r *racingDeadline) pass() {
	now := time.Now()
	r.deadline.Store(&now)
	r.passed.Store(true)
}

func (r *racingDeadline) Deadline() (time.Time, bool) { return *r.deadline.Load(), true }

func (r *racingDeadline) Done() <-chan struct{} {
	if r.passed.Load() {
		r.cancel()
	}
	return r.Context.Done()
}

func (r *racingDeadline) Err() error {
	if r.Context.Err() != nil {
		return context.DeadlineExceeded
	}
	return nil
}

// TestStatusClusters: without --wait, --clusters makes status fail when
// one of them is not live and synced, after printing the table.
func TestStatusClusters(t *testing.T) {
	h := startHub(t)
	defer h.join(t, "east", 0).Close()
	if _, err := status(t, "--debug-addr", h.debugAddr, "--clusters", "east"); err != nil {
		t.Errorf("status --clusters east: %v", err)
	}
	out, err := status(t, "--debug-addr", h.debugAddr, "--clusters", "east,north")
	if want := "not live and synced: north (not known to the hub)"; err == nil || err.Error() != want {
		t.Errorf("status --clusters east,north = %v, want %q", err, want)
	}
	if !strings.Contains(out, "\neast ") {
		t.Errorf("no table printed:\n%s", out)
	}
}

// TestStatusUnreachable: a hub that is not there gets a message that
// says what to check, at once or once --wait gives up.
func TestStatusUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	want := "cannot reach the hub's debug port at " + addr +
		" (is the hub running? set --debug-addr, or --kubeconfig to reach a hub in a cluster): dial tcp " + addr + ": connect: connection refused"
	if _, err := status(t, "--debug-addr", addr); err == nil || err.Error() != want {
		t.Errorf("status = %v\nwant %s", err, want)
	}
	if _, err := status(t, "--debug-addr", addr, "--wait", "--timeout", "100ms"); err == nil || err.Error() != "timed out after 100ms: "+want {
		t.Errorf("status --wait = %v\nwant timed out after 100ms: %s", err, want)
	}
}

// TestStatusNotAHub: an address that answers, but not as a hub (a
// spoke's debug port), is named as such, and --wait does not wait on it.
func TestStatusNotAHub(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, args := range [][]string{{"--debug-addr", addr}, {"--debug-addr", addr, "--wait", "--timeout", "10m"}} {
		if _, err := status(t, args...); err == nil || !strings.Contains(err.Error(), "answered 404 Not Found to /debug/clusters: it is not a hub's debug port") {
			t.Errorf("status %q = %v", args, err)
		}
	}
}

func TestStatusRefusesBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "xml"}, `--output "xml": want table, json or yaml`},
		{[]string{"--debug-addr", "127.0.0.1:1", "--context", "hub"}, "--debug-addr and --kubeconfig (or --context) are exclusive"},
		{[]string{"--clusters", "east,,west"}, `--clusters "east,,west": an empty cluster ID`},
		{[]string{"east"}, `unexpected argument "east"`},
	} {
		if _, err := status(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("status %q = %v, want an error saying %q", tt.args, err, tt.want)
		}
	}
}

// TestNotReady: what --wait waits for, and why.
func TestNotReady(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	synced := registry.ClusterStatus{ID: "east", State: clusterset.Live, Connected: true, LastAck: now.Add(-time.Second)}
	with := func(id federation.ClusterID, edit func(*registry.ClusterStatus)) registry.ClusterStatus {
		c := synced
		c.ID = id
		edit(&c)
		return c
	}
	for _, tt := range []struct {
		name     string
		clusters []registry.ClusterStatus
		want     []federation.ClusterID
		notReady string // the hub's /readyz; "" when ready
		out      []string
	}{
		{name: "synced", clusters: []registry.ClusterStatus{synced}},
		{name: "nothing yet", out: []string{"a first cluster (the hub knows none)"}},
		{name: "hub warming up", clusters: []registry.ClusterStatus{synced}, notReady: "/readyz answers 503: not ready", out: []string{"the hub (/readyz answers 503: not ready)"}},
		{
			name: "every kind of not ready",
			clusters: []registry.ClusterStatus{
				with("a", func(c *registry.ClusterStatus) { c.Expected, c.Connected, c.LastAck = true, false, time.Time{} }),
				with("b", func(c *registry.ClusterStatus) {
					c.Connected, c.State, c.DisconnectedAt = false, clusterset.Stale, now.Add(-time.Minute)
				}),
				with("c", func(c *registry.ClusterStatus) { c.LastAck = time.Time{} }),
				with("d", func(c *registry.ClusterStatus) { c.LastNack, c.LastNackReason = now, `service "x": port 0` }),
				with("e", func(c *registry.ClusterStatus) { c.State, c.StateSince = clusterset.Withdrawn, now.Add(-time.Hour) }),
				with("f", func(*registry.ClusterStatus) {}),
			},
			want: []federation.ClusterID{"e", "g"},
			out: []string{
				"a (a member the hub has not heard from since it started)",
				"b (stale, its spoke disconnected 1m0s ago)",
				"c (connected; its shard has not arrived yet)",
				`d (its last update was rejected: service "x": port 0)`,
				"e (withdrawn 1h0m0s ago)",
				"g (not known to the hub)",
			},
		},
		{
			name:     "withdrawn and not asked for",
			clusters: []registry.ClusterStatus{synced, with("gone", func(c *registry.ClusterStatus) { c.State = clusterset.Withdrawn })},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &hubStatus{clusters: debug.ClustersResponse{Clusters: tt.clusters}, readyChecked: true, ready: tt.notReady == "", notReady: tt.notReady}
			if diff := cmp.Diff(tt.out, notReady(s, tt.want, now)); diff != "" {
				t.Errorf("notReady (-want +got):\n%s", diff)
			}
		})
	}
}
