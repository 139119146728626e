package writeback

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/source/kube"
	"github.com/meshfed/meshfed/spoke/writeback/importwriter"
)

// Cluster is what the write-back reads of the cluster: a kube source's
// caches, once synced, and the MCS kinds the cluster serves
// ([kube.Source] is one).
type Cluster interface {
	// Synced is closed once Tables may be read.
	Synced() <-chan struct{}
	Tables() kube.Tables
	// MCS returns the MCS versions the cluster serves, and a channel
	// closed when they change.
	MCS() (kube.MCSVersions, <-chan struct{})
}

var _ Cluster = (*kube.Source)(nil)

// Config configures a [WriteBack].
type Config struct {
	// Options are the spoke's normalization options, the shard builder's:
	// the ServiceExport Valid condition is decided with them, so that it
	// says what the builder does; Events name their ClusterID.
	Options normalize.Options
	// Imports, when set, has the write-back write the clusterset's
	// imports into the cluster (MCS ServiceImports and EndpointSlices)
	// and the ServiceExports' Conflict and Ready conditions, and report
	// what the cluster holds.
	Imports *imports.Store
	// ImportWorkers write that many imports at once (0:
	// importwriter.DefaultWorkers).
	ImportWorkers int
	// Metrics, when set, registers the import writer's metrics.
	Metrics prometheus.Registerer
}

// WriteBack writes into the cluster what the spoke and the clusterset
// decided. It is the shard builder's reporter of rejected objects
// ([shard.Reporter]) and is told the source's changes ([WriteBack.Changed]).
type WriteBack struct {
	cluster    Cluster
	api        API
	cfg        Config
	log        *slog.Logger
	clock      clock.WithTicker
	rejections *rejections
	// status writes the ServiceExports' conditions once the cluster
	// serves ServiceExports (what changes before waits); writer writes the
	// imports once it serves ServiceImports.
	status *statusWriter
	writer atomic.Pointer[importwriter.Writer]
	hooks  hooks
}

var _ shard.Reporter = (*WriteBack)(nil)

// hooks tell tests what the writers do, and speed their retries up.
type hooks struct {
	statusRetry time.Duration
	// statusSynced is told the outcome of each ServiceExport status check.
	statusSynced func(key string, updated bool, err error)
	// eventWritten is told each Event recorded.
	eventWritten func(*corev1.Event)
	// importSynced is told the outcome of each import sync.
	importSynced func(key string, err error)
}

// New returns a write-back into the cluster the source reads, through
// api; a nil log discards.
func New(cluster Cluster, api API, cfg Config, log *slog.Logger) *WriteBack {
	return newWriteBack(cluster, api, cfg, log, hooks{statusRetry: statusRetryBase})
}

func newWriteBack(cluster Cluster, api API, cfg Config, log *slog.Logger, h hooks) *WriteBack {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Options = cfg.Options.WithDefaults()
	w := &WriteBack{cluster: cluster, api: api, cfg: cfg, log: log, clock: clock.RealClock{}, rejections: newRejections(), hooks: h}
	w.status = newStatusWriter(cluster.Tables(), cfg.Options, w.clock, h.statusRetry, log.With("component", "status"))
	w.status.rej, w.status.imports, w.status.synced = w.rejections, cfg.Imports, h.statusSynced
	w.rejections.notify(w.status.enqueueService)
	return w
}

// Changed is told the changes the source delivered: the ServiceExports
// whose validity they may change are checked, and a namespace's imports
// written when it appears.
func (w *WriteBack) Changed(changes []normalize.Change) {
	w.status.enqueue(changes)
	if iw := w.writer.Load(); iw != nil {
		for _, c := range changes {
			if c.Kind == normalize.KindNamespace {
				iw.NamespaceChanged(c.Name)
			}
		}
	}
}

// Run writes until ctx ends: Events of rejected objects; the
// ServiceExports' conditions once the cluster serves ServiceExports; the
// imports once it serves ServiceImports (with a store). Nothing is
// written before the source's caches have synced. It returns an error
// only for an import writer that cannot be built.
func (w *WriteBack) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-w.cluster.Synced():
	}
	g, ctx := errgroup.WithContext(ctx)
	tables := w.cluster.Tables()
	if w.api.Events != nil {
		events := &eventWriter{
			client: w.api.Events, rej: w.rejections, queue: w.rejections.startEvents(), in: tables,
			cluster: w.cfg.Options.ClusterID, clock: w.clock, log: w.log.With("component", "events"),
			limiter: flowcontrol.NewTokenBucketRateLimiter(eventQPS, eventBurst), written: w.hooks.eventWritten,
		}
		g.Go(func() error {
			<-ctx.Done()
			events.queue.ShutDown()
			return nil
		})
		g.Go(func() error {
			events.run(ctx)
			return nil
		})
	}
	if w.api.Exports != nil {
		g.Go(func() error {
			v, ok := w.awaitMCS(ctx, func(v kube.MCSVersions) bool { return v.Exports != "" })
			if !ok {
				return nil
			}
			w.runStatus(ctx, g, v.Exports)
			return nil
		})
	}
	if w.cfg.Imports != nil && w.api.Imports != nil && w.api.Slices != nil {
		g.Go(func() error {
			v, ok := w.awaitMCS(ctx, func(v kube.MCSVersions) bool { return v.Imports != "" })
			if !ok {
				return nil
			}
			iw, err := importwriter.New(importwriter.Config{
				Store: w.cfg.Imports, Imports: w.api.Imports(v.Imports), Slices: w.api.Slices,
				NamespaceExists: func(name string) bool { _, ok := tables.Namespace(name); return ok },
				Workers:         w.cfg.ImportWorkers, Metrics: w.cfg.Metrics,
			}, w.log.With("component", "imports"))
			if err != nil {
				return err
			}
			iw.SetSyncedHook(w.hooks.importSynced)
			w.writer.Store(iw)
			w.log.Info("writing the clusterset's imports", "service_import_version", v.Imports)
			return iw.Run(ctx)
		})
	}
	return g.Wait()
}

// runStatus writes the ServiceExports' conditions until ctx ends: those
// of the exports that changes, rejections and import sets concern, the
// ones that came before included.
func (w *WriteBack) runStatus(ctx context.Context, g *errgroup.Group, version string) {
	st := w.status
	queue := st.start(w.api.Exports(version))
	g.Go(func() error {
		<-ctx.Done()
		w.rejections.notify(nil)
		queue.ShutDown()
		return nil
	})
	if st.imports != nil {
		g.Go(func() error {
			st.followImports(ctx)
			return nil
		})
	}
	st.run(ctx)
}

// awaitMCS waits until the cluster serves what has asks for; false when
// ctx ends first.
func (w *WriteBack) awaitMCS(ctx context.Context, has func(kube.MCSVersions) bool) (kube.MCSVersions, bool) {
	for {
		v, changed := w.cluster.MCS()
		if has(v) {
			return v, true
		}
		select {
		case <-ctx.Done():
			return kube.MCSVersions{}, false
		case <-changed:
		}
	}
}
