package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// Source serves a cluster's Kubernetes API as [normalize.Inputs]. It only
// reads: what the spoke writes into the cluster is package writeback's,
// which reads the source's [Tables].
type Source struct {
	api API
	cfg Config
	log *slog.Logger

	clock clock.WithTicker
	queue *queue
	// in is the caches, filled in by Run before synced is closed.
	in     *caches
	synced chan struct{}
	mcs    servedMCS
}

// New returns a source reading the cluster through api. An api without
// MCS watches no ServiceExports (as in a cluster without the MCS CRDs); a
// nil log discards. Run checks cfg.
func New(api API, cfg Config, log *slog.Logger) *Source {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{
		api: api, cfg: cfg.WithDefaults(), log: log,
		clock: clock.RealClock{}, queue: newQueue(), in: &caches{}, synced: make(chan struct{}),
		mcs: servedMCS{changed: make(chan struct{})},
	}
}

// Synced is closed once the caches have synced, before the first call of
// Run's callback: [Source.Tables] may be read from then on.
func (s *Source) Synced() <-chan struct{} { return s.synced }

// Tables returns the source's caches, read-only. They are empty until
// Synced is closed.
func (s *Source) Tables() Tables { return s.in }

// Run starts the informers, waits for their caches to sync, and calls fn
// with every cached object as a change; then, until ctx ends, with the
// changes since the previous call, batched (see [Config.BatchWindow]). fn
// is called from one goroutine, with the same live Inputs each time.
//
// Run may be called once. It returns nil when ctx ends, and an error only
// for an invalid Config: API errors are logged and retried.
func (s *Source) Run(ctx context.Context, fn func(in normalize.Inputs, changes []normalize.Change)) error {
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	versions := s.discoverMCS(ctx)
	if ctx.Err() != nil {
		return nil
	}
	t := newTransforms()
	in := s.in
	informers, synced, err := s.watch(t, in)
	if err != nil {
		return err
	}
	var exports cache.SharedIndexInformer
	if versions.Exports != "" {
		// Watched from the start, so that the first shard has the exports.
		var exportsSynced cache.DoneChecker
		if exports, exportsSynced, err = s.watchExports(t, in, versions.Exports); err != nil {
			return err
		}
		informers = append(informers, exports)
		synced = append(synced, exportsSynced)
	}

	g, ctx := errgroup.WithContext(ctx)
	for _, inf := range informers {
		g.Go(func() error {
			inf.RunWithContext(ctx)
			return nil
		})
	}
	if s.api.MCS != nil {
		g.Go(func() error {
			return s.runMCS(ctx, g, t, in, versions)
		})
	}
	g.Go(func() error {
		s.deliver(ctx, in, synced, fn)
		return nil
	})
	return g.Wait()
}

// deliver waits for the caches, then hands fn the queued changes until ctx
// ends.
func (s *Source) deliver(ctx context.Context, in *caches, synced []cache.DoneChecker, fn func(normalize.Inputs, []normalize.Change)) {
	start := s.clock.Now()
	if !cache.WaitFor(ctx, "", synced...) {
		return
	}
	// Every handler has seen every listed object: the queue holds them all.
	changes := s.queue.take()
	s.log.Info("caches synced", "changes", len(changes), "duration", s.clock.Since(start).Round(time.Millisecond))
	close(s.synced)
	for {
		last := s.clock.Now()
		fn(in, changes)
		var ok bool
		if changes, ok = s.next(ctx, last); !ok {
			return
		}
	}
}

// next waits for changes: at once after a quiet period, else until
// BatchWindow has passed since last, the previous delivery. It returns
// false when ctx ends.
func (s *Source) next(ctx context.Context, last time.Time) ([]normalize.Change, bool) {
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case <-s.queue.ready:
		}
		if wait := s.cfg.BatchWindow - s.clock.Since(last); wait > 0 {
			t := s.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, false
			case <-t.C():
			}
		}
		// Empty when an earlier take drained what signalled.
		if changes := s.queue.take(); len(changes) > 0 {
			return changes, true
		}
	}
}

// watch creates the informers, with their transforms and handlers, sets
// in over their caches, and returns what tells that their handlers have
// seen the initial lists.
func (s *Source) watch(t *transforms, in *caches) ([]cache.SharedIndexInformer, []cache.DoneChecker, error) {
	byNamespace := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	type informer struct {
		kind      normalize.Kind
		inf       cache.SharedIndexInformer
		transform cache.TransformFunc
		same      func(old, cur any) bool
		idx       *cache.Indexer
	}
	informerFor := func(lw cache.ListerWatcher, obj runtime.Object, indexers cache.Indexers) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformerWithOptions(lw, obj, cache.SharedIndexInformerOptions{Indexers: indexers})
	}
	all := []informer{
		{
			normalize.KindService,
			informerFor(s.api.Services, &corev1.Service{}, byNamespace),
			transform(t.service), unchanged[corev1.Service], &in.services,
		},
		{
			normalize.KindEndpointSlice,
			informerFor(s.api.EndpointSlices, &discoveryv1.EndpointSlice{}, cache.Indexers{indexServiceName: serviceNameIndex}),
			transform(t.endpointSlice), unchanged[normalize.EndpointSlice], &in.slices,
		},
		{
			normalize.KindPod,
			informerFor(s.api.Pods, &corev1.Pod{}, nil),
			transform(t.pod), unchanged[normalize.Pod], &in.pods,
		},
		{
			normalize.KindNode,
			informerFor(s.api.Nodes, &corev1.Node{}, nil),
			transform(t.node), unchanged[corev1.Node], &in.nodes,
		},
		{
			normalize.KindNamespace,
			informerFor(s.api.Namespaces, &corev1.Namespace{}, nil),
			transform(t.namespace), unchanged[corev1.Namespace], &in.namespaces,
		},
	}
	var informers []cache.SharedIndexInformer
	var synced []cache.DoneChecker
	for _, i := range all {
		reg, err := s.handle(i.kind, i.inf, i.transform, i.same)
		if err != nil {
			return nil, nil, err
		}
		*i.idx = i.inf.GetIndexer()
		informers = append(informers, i.inf)
		synced = append(synced, reg.HasSyncedChecker())
	}
	return informers, synced, nil
}

// handle sets an informer's transform and has its changes queued.
func (s *Source) handle(kind normalize.Kind, inf cache.SharedIndexInformer, tr cache.TransformFunc, same func(old, cur any) bool) (cache.ResourceEventHandlerRegistration, error) {
	log := s.log.With("kind", kind.String())
	if err := inf.SetTransform(tr); err != nil {
		return nil, fmt.Errorf("%s informer: %w", kind.String(), err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(watchErrorHandler(log)); err != nil {
		return nil, fmt.Errorf("%s informer: %w", kind.String(), err)
	}
	reg, err := inf.AddEventHandler(handler{kind: kind, q: s.queue, log: log, same: same})
	if err != nil {
		return nil, fmt.Errorf("%s informer: %w", kind.String(), err)
	}
	return reg, nil
}

// watchErrorHandler logs what client-go's default handler logs through
// klog: the informer retries by itself.
func watchErrorHandler(log *slog.Logger) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		switch {
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			log.Debug("watch closed; resuming", "err", err)
		default:
			log.Warn("cannot watch; retrying", "err", err)
		}
	}
}

func typeName(obj any) string { return fmt.Sprintf("%T", obj) }
