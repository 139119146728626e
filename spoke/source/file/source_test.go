package file

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for an update; it only matters when a
// test fails, so it is generous for slow, loaded machines.
const waitTimeout = 20 * time.Second

type update struct {
	in      normalize.Inputs
	changes []normalize.Change
}

// logBuffer collects the source's logs; the source logs from Run's
// goroutine while the test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type harness struct {
	dir     string
	updates chan update
	logs    *logBuffer
}

// start runs a source over dir until the test ends.
func start(t *testing.T, dir string, edit ...func(*Source)) *harness {
	t.Helper()
	h := &harness{dir: dir, updates: make(chan update), logs: &logBuffer{}}
	src := New(dir, slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, e := range edit {
		e(src)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(in normalize.Inputs, changes []normalize.Change) {
			select {
			case h.updates <- update{in, changes}:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil after cancel", err)
		}
	})
	return h
}

// next waits for the next call of the callback.
func (h *harness) next(t *testing.T) update {
	t.Helper()
	select {
	case u := <-h.updates:
		return u
	case <-time.After(waitTimeout):
		t.Fatalf("no update within %v; logs:\n%s", waitTimeout, h.logs)
		return update{}
	}
}

// waitFor waits for an update whose inputs satisfy cond, for changes that
// may take one reload or several.
func (h *harness) waitFor(t *testing.T, cond func(normalize.Inputs) bool) normalize.Inputs {
	t.Helper()
	for {
		if u := h.next(t); cond(u.in) {
			return u.in
		}
	}
}

// expect waits for the next update and checks its changes.
func (h *harness) expect(t *testing.T, want ...normalize.Change) normalize.Inputs {
	t.Helper()
	u := h.next(t)
	if diff := cmp.Diff(want, u.changes); diff != "" {
		t.Fatalf("changes mismatch (-want +got):\n%s\nlogs:\n%s", diff, h.logs)
	}
	return u.in
}

// writeFile saves as many editors do, and atomically, so that no reload
// sees a half-written file: write a hidden temporary file, rename it over
// the original.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func svcYAML(ns, name string, port int) string {
	return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
		"\nspec:\n  ports:\n  - port: " + strconv.Itoa(port) + "\n"
}

const exportYAML = `apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata:
  name: cart
  namespace: shop
`

func sliceYAML(name, service, addr string) string {
	return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: " + name +
		"\n  namespace: shop\n  labels:\n    kubernetes.io/service-name: " + service +
		"\naddressType: IPv4\nendpoints:\n- addresses: [" + addr + "]\n"
}

func change(kind normalize.Kind, ns, name string) normalize.Change {
	return normalize.Change{Kind: kind, Namespace: ns, Name: name}
}

func servicePort(t *testing.T, in normalize.Inputs, ns, name string) int32 {
	t.Helper()
	svc, ok := in.Service(ns, name)
	if !ok {
		t.Fatalf("service %s/%s missing", ns, name)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("service %s/%s ports = %v", ns, name, svc.Spec.Ports)
	}
	return svc.Spec.Ports[0].Port
}

func TestRunWatchesChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cart.yaml"), svcYAML("shop", "cart", 80)+"---\n"+exportYAML+"---\n"+sliceYAML("cart-1", "cart", "10.0.0.1"))
	writeFile(t, filepath.Join(dir, "infra", "nodes.yml"), `{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-a"}}`)
	writeFile(t, filepath.Join(dir, "README.md"), "not a manifest")
	h := start(t, dir)

	in := h.expect(t,
		change(normalize.KindService, "shop", "cart"),
		change(normalize.KindServiceExport, "shop", "cart"),
		change(normalize.KindEndpointSlice, "shop", "cart"),
		change(normalize.KindNode, "", "node-a"),
	)
	if _, ok := in.Node("node-a"); !ok {
		t.Error("node-a missing")
	}
	if eps := in.EndpointSlices("shop", "cart"); len(eps) != 1 || eps[0].Name != "cart-1" {
		t.Errorf("EndpointSlices(shop, cart) = %v, want cart-1", eps)
	}
	first := in

	t.Run("edit in place", func(t *testing.T) {
		// Truncate and write: a reload may see the empty file in between,
		// so wait for the outcome rather than for one exact update.
		if err := os.WriteFile(filepath.Join(dir, "cart.yaml"), []byte(svcYAML("shop", "cart", 8080)+"---\n"+exportYAML+"---\n"+sliceYAML("cart-1", "cart", "10.0.0.1")), 0o644); err != nil {
			t.Fatal(err)
		}
		in := h.waitFor(t, func(in normalize.Inputs) bool {
			svc, ok := in.Service("shop", "cart")
			_, exported := in.ServiceExport("shop", "cart")
			return ok && exported && len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Port == 8080
		})
		if got := servicePort(t, first, "shop", "cart"); got != 80 {
			t.Errorf("earlier inputs changed: port = %d, want 80", got)
		}
		if eps := in.EndpointSlices("shop", "cart"); len(eps) != 1 {
			t.Errorf("EndpointSlices(shop, cart) = %v, want cart-1", eps)
		}
	})
	t.Run("create", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "web.yaml"), svcYAML("shop", "web", 80))
		h.expect(t, change(normalize.KindService, "shop", "web"))
	})
	t.Run("editor save by rename", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "web.yaml"), svcYAML("shop", "web", 81))
		in := h.expect(t, change(normalize.KindService, "shop", "web"))
		if got := servicePort(t, in, "shop", "web"); got != 81 {
			t.Errorf("port = %d, want 81", got)
		}
	})
	t.Run("rename away and back", func(t *testing.T) {
		if err := os.Rename(filepath.Join(dir, "web.yaml"), filepath.Join(dir, "web.yaml.bak")); err != nil {
			t.Fatal(err)
		}
		in := h.expect(t, change(normalize.KindService, "shop", "web"))
		if _, ok := in.Service("shop", "web"); ok {
			t.Error("web still present after its file was renamed away")
		}
		if err := os.Rename(filepath.Join(dir, "web.yaml.bak"), filepath.Join(dir, "web.json")); err != nil {
			t.Fatal(err)
		}
		h.expect(t, change(normalize.KindService, "shop", "web"))
	})
	t.Run("EndpointSlice moves to another service", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "cart.yaml"), svcYAML("shop", "cart", 8080)+"---\n"+exportYAML+"---\n"+sliceYAML("cart-1", "web", "10.0.0.1"))
		in := h.expect(t,
			change(normalize.KindEndpointSlice, "shop", "cart"),
			change(normalize.KindEndpointSlice, "shop", "web"),
		)
		if eps := in.EndpointSlices("shop", "cart"); len(eps) != 0 {
			t.Errorf("EndpointSlices(shop, cart) = %v, want none", eps)
		}
		if eps := in.EndpointSlices("shop", "web"); len(eps) != 1 {
			t.Errorf("EndpointSlices(shop, web) = %v, want cart-1", eps)
		}
	})
	t.Run("new subdirectory", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "more", "deeper", "db.yaml"), svcYAML("data", "db", 5432))
		h.expect(t, change(normalize.KindService, "data", "db"))
		// The new directories are watched too.
		writeFile(t, filepath.Join(dir, "more", "deeper", "db.yaml"), svcYAML("data", "db", 5433))
		h.expect(t, change(normalize.KindService, "data", "db"))
	})
	t.Run("delete", func(t *testing.T) {
		if err := os.RemoveAll(filepath.Join(dir, "infra")); err != nil {
			t.Fatal(err)
		}
		h.expect(t, change(normalize.KindNode, "", "node-a"))
	})
}

func TestRunKeepsLastGoodObjects(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML("shop", "cart", 80))
	writeFile(t, filepath.Join(dir, "b.yaml"), svcYAML("shop", "web", 80))
	h := start(t, dir)
	h.expect(t, change(normalize.KindService, "shop", "cart"), change(normalize.KindService, "shop", "web"))

	// Broken: no callback, as nothing changed. The next change elsewhere
	// proves the broken file was read and its objects kept.
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML("shop", "cart", 81)+"---\nkind: Service\n  bad: [\n")
	writeFile(t, filepath.Join(dir, "b.yaml"), svcYAML("shop", "web", 81))
	in := h.expect(t, change(normalize.KindService, "shop", "web"))
	if got := servicePort(t, in, "shop", "cart"); got != 80 {
		t.Errorf("cart port = %d, want the last good 80", got)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, `msg="cannot parse manifest file; keeping its last good objects" dir=`+dir+` file=a.yaml document=1 document_line=9`) {
		t.Errorf("logs do not name the broken file and document:\n%s", logs)
	}

	// A broken file that never parsed contributes nothing, and does not
	// stop other files.
	writeFile(t, filepath.Join(dir, "c.yaml"), "{")
	writeFile(t, filepath.Join(dir, "d.yaml"), svcYAML("shop", "db", 80))
	h.expect(t, change(normalize.KindService, "shop", "db"))

	// Fixed.
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML("shop", "cart", 82))
	in = h.expect(t, change(normalize.KindService, "shop", "cart"))
	if got := servicePort(t, in, "shop", "cart"); got != 82 {
		t.Errorf("cart port = %d, want 82", got)
	}
}

func TestRunDuplicatesAndSkippedKinds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML("shop", "cart", 80))
	writeFile(t, filepath.Join(dir, "a", "z.yaml"), svcYAML("shop", "cart", 81))
	writeFile(t, filepath.Join(dir, "b.yaml"), svcYAML("shop", "cart", 82)+"---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: cart}\n")
	h := start(t, dir)
	in := h.expect(t, change(normalize.KindService, "shop", "cart"))
	if got := servicePort(t, in, "shop", "cart"); got != 82 {
		t.Errorf("port = %d, want 82 from b.yaml, the last file", got)
	}
	logs := h.logs.String()
	for _, want := range []string{
		`level=WARN msg="duplicate manifest object; the last file wins"`,
		`file=b.yaml previous_file=a/z.yaml`,
		`level=DEBUG msg="skipping manifest objects of an unsupported kind" dir=` + dir + ` file=b.yaml apiVersion=apps/v1 kind=Deployment count=1`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}

	// Reloads for other reasons do not repeat the warning.
	writeFile(t, filepath.Join(dir, "c.yaml"), svcYAML("shop", "web", 80))
	h.expect(t, change(normalize.KindService, "shop", "web"))
	if n := strings.Count(h.logs.String(), "duplicate manifest object"); n != 2 {
		t.Errorf("duplicate warnings = %d, want 2 (a/z.yaml over a.yaml, b.yaml over a/z.yaml), each once", n)
	}
}

func TestRunCreationTimestamps(t *testing.T) {
	dir := t.TempDir()
	explicit := "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: shop\n  creationTimestamp: \"2020-01-01T00:00:00Z\"\n"
	writeFile(t, filepath.Join(dir, "cart.yaml"), svcYAML("shop", "cart", 80)+"---\n"+exportYAML)
	writeFile(t, filepath.Join(dir, "web.yaml"), explicit)

	var mu sync.Mutex // now is called from Run's goroutine
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := start(t, dir, func(s *Source) {
		s.now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(time.Minute)
			return clock
		}
	})
	in := h.expect(t,
		change(normalize.KindService, "shop", "cart"),
		change(normalize.KindService, "shop", "web"),
		change(normalize.KindServiceExport, "shop", "cart"),
	)
	exportTime := func(in normalize.Inputs) time.Time {
		se, ok := in.ServiceExport("shop", "cart")
		if !ok {
			t.Fatal("ServiceExport missing")
		}
		return se.CreationTimestamp.Time
	}
	created := exportTime(in)
	if created.IsZero() {
		t.Fatal("ServiceExport has no creationTimestamp")
	}
	if web, _ := in.Service("shop", "web"); !web.CreationTimestamp.Time.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("explicit creationTimestamp = %v, want 2020-01-01", web.CreationTimestamp)
	}

	// Rewritten: the same export keeps its time.
	writeFile(t, filepath.Join(dir, "cart.yaml"), svcYAML("shop", "cart", 80)+"---\n"+exportYAML+"  labels: {team: a}\n")
	in = h.expect(t, change(normalize.KindServiceExport, "shop", "cart"))
	if got := exportTime(in); !got.Equal(created) {
		t.Errorf("creationTimestamp after an edit = %v, want %v", got, created)
	}

	// Moved to a subdirectory: still the same export.
	if err := os.Mkdir(filepath.Join(dir, "shop"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "cart.yaml"), filepath.Join(dir, "shop", "cart.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "db.yaml"), svcYAML("shop", "db", 5432))
	in = h.waitFor(t, func(in normalize.Inputs) bool { _, ok := in.Service("shop", "db"); return ok })
	if got := exportTime(in); !got.Equal(created) {
		t.Errorf("creationTimestamp after a move = %v, want %v", got, created)
	}

	// Deleted and created again: a new export, a new time.
	if err := os.Remove(filepath.Join(dir, "shop", "cart.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, func(in normalize.Inputs) bool { _, ok := in.ServiceExport("shop", "cart"); return !ok })
	writeFile(t, filepath.Join(dir, "shop", "cart.yaml"), exportYAML)
	in = h.expect(t, change(normalize.KindServiceExport, "shop", "cart"))
	if got := exportTime(in); !got.After(created) {
		t.Errorf("creationTimestamp of the new export = %v, want after %v", got, created)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestRunConfigMapMount(t *testing.T) {
	// A mounted ConfigMap: files are symlinks through "..data" into a
	// hidden timestamped directory, swapped atomically on update.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "..2026_01", "svc.yaml"), svcYAML("shop", "cart", 80))
	symlink(t, "..2026_01", filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "svc.yaml"), filepath.Join(dir, "svc.yaml"))
	h := start(t, dir)
	h.expect(t, change(normalize.KindService, "shop", "cart"))

	writeFile(t, filepath.Join(dir, "..2026_02", "svc.yaml"), svcYAML("shop", "cart", 81))
	symlink(t, "..2026_02", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	in := h.expect(t, change(normalize.KindService, "shop", "cart"))
	if got := servicePort(t, in, "shop", "cart"); got != 81 {
		t.Errorf("port = %d, want 81", got)
	}
	if logs := h.logs.String(); strings.Contains(logs, "duplicate") {
		t.Errorf("hidden directory read as well:\n%s", logs)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file.yaml")
	writeFile(t, notDir, "")
	tests := []struct {
		name string
		dir  string
		want error
	}{
		{name: "missing", dir: filepath.Join(dir, "missing"), want: fs.ErrNotExist},
		{name: "not a directory", dir: notDir, want: ErrNotDirectory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			err := New(tt.dir, nil).Run(t.Context(), func(normalize.Inputs, []normalize.Change) { called = true })
			if !errors.Is(err, tt.want) {
				t.Errorf("Run() = %v, want %v", err, tt.want)
			}
			if called {
				t.Error("callback called")
			}
		})
	}
}

// TestRunBadObjectsReachTheBuilder: the file source hands on what an API
// server would refuse (a Service port 70000, an endpoint address
// 999.1.1.1, which reach the spoke only this way), and the shard builder
// keeps the last good versions of those objects.
func TestRunBadObjectsReachTheBuilder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cart.yaml"), svcYAML("shop", "cart", 80)+"---\n"+exportYAML+"---\n"+sliceYAML("cart-1", "cart", "10.0.0.1"))
	h := start(t, dir)
	tr := shard.NewTracker()
	reg := prometheus.NewRegistry()
	b := shard.NewBuilder(normalize.Options{ClusterID: "east"}, tr, slog.New(slog.DiscardHandler), shard.WithMetrics(reg))
	u := h.next(t)
	b.Apply(u.in, u.changes)
	if s, e, _ := tr.Counts(); s != 1 || e != 1 {
		t.Fatalf("%d services and %d endpoints, want 1 and 1", s, e)
	}

	writeFile(t, filepath.Join(dir, "cart.yaml"), svcYAML("shop", "cart", 70000)+"---\n"+exportYAML+"---\n"+sliceYAML("cart-1", "cart", "999.1.1.1"))
	u = h.next(t)
	if got := servicePort(t, u.in, "shop", "cart"); got != 70000 {
		t.Fatalf("cart port = %d, want the file's 70000", got)
	}
	b.Apply(u.in, u.changes)
	if s, e, _ := tr.Counts(); s != 1 || e != 1 {
		t.Errorf("%d services and %d endpoints, want the last good 1 and 1", s, e)
	}
	want := `
# HELP meshfed_spoke_rejected_objects Objects the spoke rejects now (their last good version, if any, stays federated), by kind and reason.
# TYPE meshfed_spoke_rejected_objects gauge
meshfed_spoke_rejected_objects{kind="EndpointSlice",reason="InvalidAddress"} 1
meshfed_spoke_rejected_objects{kind="Service",reason="InvalidPort"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshfed_spoke_rejected_objects"); err != nil {
		t.Error(err)
	}
}
