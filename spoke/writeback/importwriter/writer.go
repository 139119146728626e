package importwriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/imports"
)

// Defaults of [Config].
const (
	DefaultWorkers   = 16
	DefaultRetryBase = 500 * time.Millisecond
	retryMax         = 5 * time.Minute
	maxWorkers       = 64
)

// Config configures a [Writer].
type Config struct {
	// Store is where the imports come from and the holdings go.
	Store *imports.Store
	// Imports and Slices are the cluster's API.
	Imports ImportsAPI
	Slices  SlicesAPI
	// NamespaceExists tells whether the cluster has a namespace. It reads
	// a synced cache: the writer reports an import whose namespace is
	// missing as held nowhere (no_namespace).
	NamespaceExists func(name string) bool
	// Workers sync that many imports at once, each import on one worker
	// at a time (default [DefaultWorkers]): a sync waits for the API
	// server several times, and one worker alone would leave most of the
	// request rate unused.
	Workers int
	// RetryBase is the first backoff of an import whose sync failed,
	// doubling up to 5 minutes (default [DefaultRetryBase]).
	RetryBase time.Duration
	// Metrics, when set, registers the writer's metrics.
	Metrics prometheus.Registerer
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.RetryBase == 0 {
		c.RetryBase = DefaultRetryBase
	}
	return c
}

// Validate reports the problems in c.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil || c.Imports == nil || c.Slices == nil || c.NamespaceExists == nil {
		errs = append(errs, errors.New("store, imports and slices APIs and the namespace lookup are required"))
	}
	if c.Workers < 1 || c.Workers > maxWorkers {
		errs = append(errs, fmt.Errorf("workers %d: want 1 to %d", c.Workers, maxWorkers))
	}
	if c.RetryBase <= 0 || c.RetryBase > retryMax {
		errs = append(errs, fmt.Errorf("retry base %v: want above 0, at most %v", c.RetryBase, retryMax))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// ErrInvalidConfig is wrapped by the errors of [Config.Validate].
var ErrInvalidConfig = errors.New("invalid import writer config")

// errNotOurs is a sync's error when the name of an object it would write
// is taken by an object meshfed does not own.
var errNotOurs = errors.New("the name is taken by an object meshfed does not own (no ownership label)")

// Writer makes the cluster hold the imports of its store's current set.
type Writer struct {
	cfg     Config
	log     *slog.Logger
	queue   workqueue.TypedRateLimitingInterface[string]
	metrics *metrics

	importsInf, slicesInf cache.SharedIndexInformer

	// cur is the set the workers write, with its keys by namespace; nil
	// until the store has one.
	cur atomic.Pointer[setIndex]
	// conditionsPruned: the API server drops ServiceImport status
	// conditions (an old CRD), so they are not compared.
	conditionsPruned atomic.Bool

	mu sync.Mutex
	// notOurs are the imports whose ServiceImport or a slice name is
	// taken by another's object: logged once, counted in the metric.
	notOurs map[string]bool
	// created are the objects ("kind/namespace/name") the writer created
	// lately, until its informer shows them: a create that finds one of
	// them there met its own object, not another's.
	created map[string]time.Time

	// synced, when set, is told the outcome of each sync (tests).
	synced func(key string, err error)
}

type setIndex struct {
	set         *imports.Set
	byNamespace map[string][]string
}

// mcsImport returns the set's import of key if it is an MCS import: a
// spoke that serves its cluster's mesh is sent every federated service,
// and only the MCS imports become ServiceImports.
func (x *setIndex) mcsImport(key string) (*federationpb.Import, bool) {
	im, ok := x.set.Import(key)
	if !ok || !im.GetMcs() {
		return nil, false
	}
	return im, true
}

// New returns a writer; Run starts it.
func New(cfg Config, log *slog.Logger) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{
		cfg: cfg, log: log, notOurs: map[string]bool{}, created: map[string]time.Time{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ""}),
		metrics: newMetrics(cfg.Metrics),
	}
	w.importsInf = cache.NewSharedIndexInformerWithOptions(cfg.Imports.ListerWatcher(importSelector), &mcsv1beta1.ServiceImport{},
		cache.SharedIndexInformerOptions{})
	w.slicesInf = cache.NewSharedIndexInformerWithOptions(cfg.Slices.ListerWatcher(sliceSelector), &discoveryv1.EndpointSlice{},
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{indexImport: sliceImportKey}})
	for _, i := range []struct {
		inf       cache.SharedIndexInformer
		transform cache.TransformFunc
		key       func(any) (string, bool)
	}{{w.importsInf, transformImport, importKeyOf}, {w.slicesInf, transformSlice, sliceKeyOf}} {
		if err := i.inf.SetTransform(i.transform); err != nil {
			return nil, err
		}
		if err := i.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			switch {
			case apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				log.Debug("watch closed; resuming", "err", err)
			default:
				log.Warn("cannot watch; retrying", "err", err)
			}
		}); err != nil {
			return nil, err
		}
		if _, err := i.inf.AddEventHandler(keyHandler{key: i.key, enqueue: w.queue.Add}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// SetSyncedHook has fn told the outcome of each sync of an import; call
// it before Run (tests).
func (w *Writer) SetSyncedHook(fn func(key string, err error)) { w.synced = fn }

// NamespaceChanged schedules the imports of a namespace that was created
// or deleted.
func (w *Writer) NamespaceChanged(name string) {
	if cur := w.cur.Load(); cur != nil {
		for _, k := range cur.byNamespace[name] {
			w.queue.Add(k)
		}
	}
}

// Run lists meshfed's ServiceImports and EndpointSlices, reports what the
// cluster holds, then makes it hold the store's current set until ctx
// ends. The caller has synced the namespace cache NamespaceExists reads.
func (w *Writer) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, inf := range []cache.SharedIndexInformer{w.importsInf, w.slicesInf} {
		g.Go(func() error {
			inf.RunWithContext(ctx)
			return nil
		})
	}
	g.Go(func() error {
		<-ctx.Done()
		w.queue.ShutDown()
		return nil
	})
	g.Go(func() error {
		start := time.Now()
		if !cache.WaitForCacheSync(ctx.Done(), w.importsInf.HasSynced, w.slicesInf.HasSynced) {
			return nil
		}
		// What the cluster holds, before any write: a hub replica learns
		// the ClusterSetIPs handed out before from it.
		held := w.cfg.Store.Held()
		for _, obj := range w.importsInf.GetStore().List() {
			if si, ok := obj.(*mcsv1beta1.ServiceImport); ok {
				held.Set(heldOf(si))
			}
		}
		held.Synced()
		w.log.Info("ServiceImports and EndpointSlices listed", "service_imports", len(w.importsInf.GetStore().ListKeys()),
			"endpoint_slices", len(w.slicesInf.GetStore().ListKeys()), "duration", time.Since(start).Round(time.Millisecond))
		// The set at hand is in place before any sync: a sync without a
		// set writes nothing.
		prev := w.next(nil)
		for range w.cfg.Workers {
			g.Go(func() error {
				w.work(ctx)
				return nil
			})
		}
		w.follow(ctx, prev)
		return nil
	})
	return g.Wait()
}

// follow schedules the imports each new set changes until ctx ends.
func (w *Writer) follow(ctx context.Context, prev *imports.Set) {
	for {
		// The channel before the set: a set published in between closes it.
		_, changed := w.cfg.Store.Current()
		prev = w.next(prev)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// next takes the store's current set, if it is not prev, and schedules
// the imports it changes (pointers differ: the store keeps an unchanged
// import's). The first set schedules every import, and every object
// meshfed holds, so that those of a previous life that the set lacks go.
func (w *Writer) next(prev *imports.Set) *imports.Set {
	set, _ := w.cfg.Store.Current()
	if set == nil || set == prev {
		return prev
	}
	idx := &setIndex{set: set, byNamespace: map[string][]string{}}
	for k, im := range set.Imports {
		if im.GetMcs() {
			idx.byNamespace[im.GetNamespace()] = append(idx.byNamespace[im.GetNamespace()], k)
		}
	}
	w.cur.Store(idx)
	set.Changed(prev, w.queue.Add)
	if prev == nil {
		// And what the cluster holds that the first set may not want.
		for _, k := range w.importsInf.GetStore().ListKeys() {
			w.queue.Add(k)
		}
		for _, k := range w.slicesInf.GetIndexer().ListIndexFuncValues(indexImport) {
			w.queue.Add(k)
		}
	}
	return set
}

func (w *Writer) work(ctx context.Context) {
	for {
		key, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		err := w.sync(ctx, key)
		switch {
		case err == nil:
			w.queue.Forget(key)
		case ctx.Err() != nil:
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err):
			// The informer is about to deliver what changed.
			w.log.Debug("import changed under its write; retrying", "import", key, "err", err)
			w.queue.AddRateLimited(key)
		case errors.Is(err, errNotOurs):
			w.queue.AddRateLimited(key)
		default:
			w.log.Warn("cannot write import; retrying", "import", key, "err", err)
			w.queue.AddRateLimited(key)
		}
		w.queue.Done(key)
		if w.synced != nil {
			w.synced(key, err)
		}
	}
}

// sync makes the cluster hold one import as the current set says, and
// reports what it holds.
func (w *Writer) sync(ctx context.Context, key string) error {
	idx := w.cur.Load()
	defer w.reportHeld(key, idx)
	if idx == nil {
		return nil // no set yet: nothing is written, nothing removed
	}
	cur, _ := getImport(w.importsInf.GetStore(), key)
	im, wanted := idx.mcsImport(key)
	if !wanted {
		w.setNotOurs(key, false)
		return w.remove(ctx, key, cur)
	}
	if !w.cfg.NamespaceExists(im.GetNamespace()) {
		w.setNotOurs(key, false)
		return nil
	}
	if cur != nil && cur.DeletionTimestamp != nil {
		return nil // its deletion, when done, schedules the import again
	}
	si, err := w.writeImport(ctx, key, im, cur)
	if errors.Is(err, errNotOurs) {
		// Another's ServiceImport: meshfed's slices would claim
		// endpoints for it.
		if rerr := w.removeSlices(ctx, key, nil); rerr != nil {
			return rerr
		}
	}
	if err != nil {
		return err
	}
	err = w.writeSlices(ctx, key, im, si)
	w.setNotOurs(key, errors.Is(err, errNotOurs))
	return err
}

// writeImport creates or updates the ServiceImport, then its status,
// and returns what the cluster holds.
func (w *Writer) writeImport(ctx context.Context, key string, im *federationpb.Import, cur *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	want := desiredImport(im)
	api := w.cfg.Imports
	if cur == nil {
		created, err := api.Create(ctx, want)
		w.metrics.write("ServiceImport", "create", err)
		if apierrors.IsAlreadyExists(err) && !w.createdLately("ServiceImport/"+key) {
			w.setNotOurs(key, true)
			return nil, fmt.Errorf("service import %s: %w", key, errNotOurs)
		}
		if err != nil {
			return nil, fmt.Errorf("service import %s: create: %w", key, err)
		}
		w.markCreated("ServiceImport/" + key)
		cur = created
	} else if importChanged(cur, want) {
		upd := want.DeepCopy()
		upd.UID, upd.ResourceVersion = cur.UID, cur.ResourceVersion
		upd.Labels, upd.Annotations = importMeta(cur, want)
		upd.Finalizers, upd.OwnerReferences = cur.Finalizers, cur.OwnerReferences
		updated, err := api.Update(ctx, upd)
		w.metrics.write("ServiceImport", "update", err)
		if err != nil {
			return nil, fmt.Errorf("service import %s: update: %w", key, err)
		}
		cur = updated
	}
	if statusChanged(cur, want, !w.conditionsPruned.Load()) {
		upd := cur.DeepCopy()
		upd.Status.Clusters = want.Status.Clusters
		ready := want.Status.Conditions[0]
		ready.ObservedGeneration = cur.Generation
		meta.SetStatusCondition(&upd.Status.Conditions, ready)
		updated, err := api.UpdateStatus(ctx, upd)
		w.metrics.write("ServiceImport", "update_status", err)
		if err != nil {
			return nil, fmt.Errorf("service import %s: update status: %w", key, err)
		}
		// A ServiceImport CRD older than status conditions prunes them:
		// then only the clusters are kept current, rather than rewriting
		// every import's status on every reconcile.
		if meta.FindStatusCondition(updated.Status.Conditions, ready.Type) == nil && !w.conditionsPruned.Swap(true) {
			w.log.Warn("the ServiceImport CRD drops status conditions: imports will show no Ready condition (install the CRD the spoke chart ships)",
				"import", key)
		}
		cur = updated
	}
	return cur, nil
}

// writeSlices makes the import's slices those im asks for.
func (w *Writer) writeSlices(ctx context.Context, key string, im *federationpb.Import, si *mcsv1beta1.ServiceImport) error {
	want := desiredSlices(im, ownerRef(w.cfg.Imports.APIVersion(), si.Name, si.UID))
	store := w.slicesInf.GetStore()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(want)) {
		ws := want[name]
		cur, _ := getSlice(store, ws.Namespace+"/"+name)
		switch {
		case cur == nil:
			_, err := w.cfg.Slices.Create(ctx, ws)
			w.metrics.write("EndpointSlice", "create", err)
			if apierrors.IsAlreadyExists(err) && !w.createdLately("EndpointSlice/"+ws.Namespace+"/"+name) {
				err = errNotOurs
			}
			if err == nil {
				w.markCreated("EndpointSlice/" + ws.Namespace + "/" + name)
			} else {
				errs = append(errs, fmt.Errorf("endpoint slice %s/%s: create: %w", ws.Namespace, name, err))
			}
		case sliceChanged(cur, ws):
			upd := ws.DeepCopy()
			upd.UID, upd.ResourceVersion = cur.UID, cur.ResourceVersion
			// What others added stays.
			upd.Labels = merged(cur.Labels, ws.Labels, nil)
			upd.Annotations, upd.Finalizers = cur.Annotations, cur.Finalizers
			_, err := w.cfg.Slices.Update(ctx, upd)
			w.metrics.write("EndpointSlice", "update", err)
			if err != nil {
				errs = append(errs, fmt.Errorf("endpoint slice %s/%s: update: %w", ws.Namespace, name, err))
			}
		}
	}
	if err := w.removeSlices(ctx, key, want); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// remove deletes meshfed's ServiceImport of key and its slices.
func (w *Writer) remove(ctx context.Context, key string, cur *mcsv1beta1.ServiceImport) error {
	if err := w.removeSlices(ctx, key, nil); err != nil {
		return err
	}
	if cur == nil || cur.DeletionTimestamp != nil {
		return nil
	}
	err := w.cfg.Imports.Delete(ctx, cur.Namespace, cur.Name, metav1.Preconditions{UID: &cur.UID})
	w.metrics.write("ServiceImport", "delete", err)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("service import %s: delete: %w", key, err)
	}
	return nil
}

// removeSlices deletes meshfed's slices of key that keep does not name.
// The UID precondition deletes only the object meshfed saw as its own.
func (w *Writer) removeSlices(ctx context.Context, key string, keep map[string]*discoveryv1.EndpointSlice) error {
	objs, err := w.slicesInf.GetIndexer().ByIndex(indexImport, key)
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objs {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || keep[s.Name] != nil || s.DeletionTimestamp != nil {
			continue
		}
		err := w.cfg.Slices.Delete(ctx, s.Namespace, s.Name, metav1.Preconditions{UID: &s.UID})
		w.metrics.write("EndpointSlice", "delete", err)
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("endpoint slice %s/%s: delete: %w", s.Namespace, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// createdWindow is how long a created object may take to reach the
// writer's informer before a create that finds it there counts as
// finding another's.
const createdWindow = time.Minute

func (w *Writer) markCreated(obj string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for k, t := range w.created {
		if now.Sub(t) > createdWindow {
			delete(w.created, k)
		}
	}
	w.created[obj] = now
}

// createdLately reports whether the writer created obj within
// createdWindow: its informer has yet to show it.
func (w *Writer) createdLately(obj string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.created[obj]
	return ok && time.Since(t) <= createdWindow
}

// reportHeld tells the store what the cluster holds of key: the
// ServiceImport meshfed's informer has (the truth, not what was written),
// or that the cluster lacks the namespace of an import of the set.
func (w *Writer) reportHeld(key string, idx *setIndex) {
	held := w.cfg.Store.Held()
	if si, ok := getImport(w.importsInf.GetStore(), key); ok {
		held.Set(heldOf(si))
		return
	}
	if idx != nil {
		if im, ok := idx.mcsImport(key); ok && !w.cfg.NamespaceExists(im.GetNamespace()) {
			held.Set(&federationpb.HeldImport{Namespace: im.GetNamespace(), Name: im.GetName(), NoNamespace: true})
			return
		}
	}
	held.Delete(key)
}

func heldOf(si *mcsv1beta1.ServiceImport) *federationpb.HeldImport {
	h := &federationpb.HeldImport{Namespace: si.Namespace, Name: si.Name, Ips: slices.Clone(si.Spec.IPs)}
	for _, c := range si.Status.Clusters {
		h.Clusters = append(h.Clusters, c.Cluster)
	}
	slices.Sort(h.Clusters)
	return h
}

// setNotOurs records whether key's objects are blocked by another's, and
// logs when that starts and ends.
func (w *Writer) setNotOurs(key string, blocked bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.notOurs[key] == blocked {
		return
	}
	if blocked {
		w.notOurs[key] = true
		w.log.Warn("an object meshfed does not own has the name of an import's ServiceImport or EndpointSlice; meshfed leaves it alone and does not import the service here until it goes",
			"import", key, "label", LabelManagedBy+"="+ManagedBy)
	} else {
		delete(w.notOurs, key)
		w.log.Info("the import's objects are meshfed's again", "import", key)
	}
	w.metrics.notOurs.Set(float64(len(w.notOurs)))
}

func getImport(store cache.Store, key string) (*mcsv1beta1.ServiceImport, bool) {
	return get[mcsv1beta1.ServiceImport](store, key)
}

func getSlice(store cache.Store, key string) (*discoveryv1.EndpointSlice, bool) {
	return get[discoveryv1.EndpointSlice](store, key)
}

func get[T any, P interface {
	*T
	runtime.Object
}](store cache.Store, key string) (P, bool) {
	obj, ok, err := store.GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	o, ok := obj.(P)
	return o, ok
}
