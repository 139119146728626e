package writeback

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testlog"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/kubeclient"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/source/kube"
)

// waitTimeout bounds every wait; it only matters when a test fails.
const waitTimeout = testwait.Timeout

// rig runs a spoke's reading and writing halves against a real API
// server, wired as spoke.New wires them: the kube source, a shard builder
// that reports its rejections to the write-back, and the write-back, told
// each batch of changes after the builder.
type rig struct {
	c     *kubetest.Cluster
	store *imports.Store
	link  *imports.Link
	reg   *prometheus.Registry
	logs  *testlog.Buffer
	tr    trackedShard
	wb    *WriteBack
	// status has each ServiceExport status check; events each Event
	// written, by name.
	status chan statusEvent
	events sync.Map

	mu     sync.Mutex
	syncOK map[string]int // successful import syncs by import key
	in     normalize.Inputs
	// sliceChanges are the EndpointSlice changes the source delivered.
	sliceChanges []normalize.Change
	// statusByKey holds the checks received but not yet asked for.
	statusByKey map[string][]statusEvent
	stop        func()
}

type statusEvent struct {
	key     string
	updated bool
	err     error
}

// rigConfig is what a rig is built with; options change it.
type rigConfig struct {
	kube    kube.Config
	wb      Config
	clients kubeclient.Options
	// wrap wraps the transport of the rig's clients.
	wrap func(http.RoundTripper) http.RoundTripper
	// imports: the write-back writes the imports of a store, which a test
	// link feeds (or the store given).
	imports bool
	store   *imports.Store
	// applied is called on the source's goroutine after the builder
	// applied each batch.
	applied func(trackedShard)
}

type rigOption func(*rigConfig)

// withImports has the write-back write the imports of store (nil: one
// the rig's link feeds).
func withImports(store *imports.Store) rigOption {
	return func(c *rigConfig) { c.imports, c.store = true, store }
}

func withTransport(wrap func(http.RoundTripper) http.RoundTripper) rigOption {
	return func(c *rigConfig) { c.wrap = wrap }
}

func run(t testing.TB, c *kubetest.Cluster, opts ...rigOption) *rig {
	t.Helper()
	r := &rig{
		c: c, reg: prometheus.NewRegistry(), logs: &testlog.Buffer{}, tr: newTrackedShard(), status: make(chan statusEvent, 1000),
		syncOK: map[string]int{}, statusByKey: map[string][]statusEvent{},
	}
	cfg := rigConfig{
		kube: kube.Config{Options: normalizetest.Options, DiscoveryInterval: 50 * time.Millisecond},
		wb:   Config{Options: normalizetest.Options, Metrics: r.reg},
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.imports {
		r.store = cfg.store
		if r.store == nil {
			r.store = imports.NewStore()
			r.link = r.store.Link("hub-test")
			r.link.Start()
		}
		cfg.kube.DiscoverImports, cfg.wb.Imports = true, r.store
	}
	rc := rest.CopyConfig(c.Config)
	if cfg.wrap != nil {
		rc.Wrap(cfg.wrap)
	}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clients, err := kubeclient.New(rc, cfg.clients)
	if err != nil {
		t.Fatal(err)
	}
	src := kube.New(kube.NewAPI(clients), cfg.kube, log.With("component", "source"))
	r.wb = newWriteBack(src, NewAPI(clients), cfg.wb, log.With("component", "writeback"), hooks{
		statusRetry:  10 * time.Millisecond,
		statusSynced: func(key string, updated bool, err error) { r.status <- statusEvent{key, updated, err} },
		eventWritten: func(ev *corev1.Event) { r.events.Store(ev.Name, ev) },
		importSynced: func(key string, err error) {
			if err == nil {
				r.mu.Lock()
				r.syncOK[key]++
				r.mu.Unlock()
			}
		},
	})
	builder := shard.NewBuilder(normalizetest.Options, r.tr.Tracker, log.With("component", "builder"), shard.WithReporter(r.wb))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() {
		done <- src.Run(ctx, func(in normalize.Inputs, changes []normalize.Change) {
			builder.Apply(in, changes)
			r.wb.Changed(changes)
			if cfg.applied != nil {
				cfg.applied(r.tr)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.in = in
			for _, c := range changes {
				if c.Kind == normalize.KindEndpointSlice && c.Namespace != "default" { // the API server's own
					r.sliceChanges = append(r.sliceChanges, c)
				}
			}
		})
	}()
	go func() { done <- r.wb.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			for range 2 {
				if err := <-done; err != nil {
					t.Errorf("Run() = %v", err)
				}
			}
		})
	}
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("logs:\n%s", r.logs)
		}
	})
	return r
}

// nextStatus waits for the next status check of key. Checks of other
// keys wait for their turn.
func (r *rig) nextStatus(t *testing.T, key string) statusEvent {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		if q := r.statusByKey[key]; len(q) > 0 {
			r.statusByKey[key] = q[1:]
			return q[0]
		}
		select {
		case e := <-r.status:
			r.statusByKey[e.key] = append(r.statusByKey[e.key], e)
		case <-deadline.C:
			t.Fatalf("no status check of %s within %v", key, waitTimeout)
		}
	}
}

// trackedShard is a shard tracker with one stream, to one hub.
type trackedShard struct {
	*shard.Tracker
	*shard.Stream
}

func newTrackedShard() trackedShard {
	t := shard.NewTracker()
	return trackedShard{t, t.Open()}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
