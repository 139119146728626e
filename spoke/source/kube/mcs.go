package kube

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/source/kube/importwriter"
)

// The MCS kinds are custom resources: a cluster may have their CRDs from
// the start, get them later, or serve only v1alpha1. The source asks
// discovery at start (retrying until it can tell), watches what is served,
// and asks again every DiscoveryInterval for what is not, starting the
// ServiceExport informer (and the status writer) or the import writer
// when its CRD appears: installing the CRDs needs no restart.

// discoverMCS returns the MCS versions the cluster serves, retrying with
// backoff until discovery answers or ctx ends.
func (s *Source) discoverMCS(ctx context.Context) MCSVersions {
	if s.api.MCS == nil {
		return MCSVersions{}
	}
	backoff := time.Second
	for {
		v, err := s.api.MCS.Served(ctx)
		if err == nil {
			s.logMCS(v)
			return v
		}
		s.log.Warn("cannot discover the MCS API; retrying", "group", mcsv1beta1.GroupName, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return MCSVersions{}
		case <-s.clock.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (s *Source) logMCS(v MCSVersions) {
	if v.Exports == "" {
		s.log.Warn("the cluster serves no MCS ServiceExports; only services labelled or exported by policy are federated until it does",
			"group", mcsv1beta1.GroupName, "recheck_every", s.cfg.DiscoveryInterval)
	}
	if s.cfg.Imports != nil && v.Imports == "" {
		s.log.Warn("the cluster serves no MCS ServiceImports; the clusterset's services are not imported until it does",
			"group", mcsv1beta1.GroupName, "recheck_every", s.cfg.DiscoveryInterval)
	}
}

// watchExports returns the ServiceExport informer of a served version,
// its changes queued and its cache in in.
func (s *Source) watchExports(t *transforms, in *caches, version string) (cache.SharedIndexInformer, cache.DoneChecker, error) {
	inf := cache.NewSharedIndexInformerWithOptions(s.api.MCS.Exports(version).ListerWatcher(), &mcsv1beta1.ServiceExport{},
		cache.SharedIndexInformerOptions{})
	reg, err := s.handle(normalize.KindServiceExport, inf, transform(t.serviceExport), unchanged[mcsv1beta1.ServiceExport])
	if err != nil {
		return nil, nil, err
	}
	idx := inf.GetIndexer()
	in.exports.Store(&idx)
	return inf, reg.HasSyncedChecker(), nil
}

// startStatus starts the ServiceExport status writer.
func (s *Source) startStatus(ctx context.Context, g *errgroup.Group, in *caches, version string) {
	status := newStatusWriter(s.api.MCS.Exports(version), in, s.cfg.Options, s.clock, s.statusRetry, s.log.With("component", "status"))
	status.rej = s.rejections
	status.synced = s.statusSynced
	status.imports = s.cfg.Imports
	s.status.Store(status)
	s.rejections.notify(status.enqueueService)
	g.Go(func() error {
		<-ctx.Done()
		s.rejections.notify(nil)
		status.queue.ShutDown()
		return nil
	})
	g.Go(func() error {
		status.run(ctx)
		return nil
	})
	if status.imports != nil {
		g.Go(func() error {
			status.followImports(ctx)
			return nil
		})
	}
}

// runMCS starts the import writer when the cluster serves ServiceImports,
// and watches for the MCS kinds it does not serve yet.
func (s *Source) runMCS(ctx context.Context, g *errgroup.Group, t *transforms, in *caches, synced []cache.DoneChecker, v MCSVersions) error {
	wantImports := s.cfg.Imports != nil && s.api.Slices != nil
	var started MCSVersions
	start := func(v MCSVersions) error {
		if v.Exports != "" && started.Exports == "" {
			started.Exports = v.Exports
			if in.exportsIndex() == nil { // not watched from the start
				// The status writer first, so that it checks the exports the
				// informer lists.
				s.startStatus(ctx, g, in, v.Exports)
				inf, _, err := s.watchExports(t, in, v.Exports)
				if err != nil {
					return err
				}
				g.Go(func() error {
					inf.RunWithContext(ctx)
					return nil
				})
				s.log.Info("the cluster serves MCS ServiceExports now; watching them", "version", v.Exports)
			}
		}
		if wantImports && v.Imports != "" && started.Imports == "" {
			started.Imports = v.Imports
			w, err := importwriter.New(importwriter.Config{
				Store: s.cfg.Imports, Imports: s.api.MCS.Imports(v.Imports), Slices: s.api.Slices,
				NamespaceExists: func(name string) bool { _, ok := in.Namespace(name); return ok },
				Workers:         s.cfg.ImportWorkers, Metrics: s.cfg.Metrics,
			}, s.log.With("component", "imports"))
			if err != nil {
				return err
			}
			w.SetSyncedHook(s.importWriterSynced)
			g.Go(func() error {
				// The namespace cache first: an import whose namespace is
				// not in it is reported as held nowhere.
				if !cache.WaitFor(ctx, "", synced...) {
					return nil
				}
				s.writer.Store(w)
				s.log.Info("writing the clusterset's imports", "service_import_version", v.Imports)
				return w.Run(ctx)
			})
		}
		return nil
	}
	if err := start(v); err != nil {
		return err
	}
	for started.Exports == "" || (wantImports && started.Imports == "") {
		select {
		case <-ctx.Done():
			return nil
		case <-s.clock.After(s.cfg.DiscoveryInterval):
		}
		v, err := s.api.MCS.Served(ctx)
		if err != nil {
			s.log.Debug("cannot discover the MCS API; asking again later", "err", err)
			continue
		}
		if err := start(v); err != nil {
			return err
		}
	}
	return nil
}
