package kube

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// The MCS kinds are custom resources: a cluster may have their CRDs from
// the start, get them later, or serve only v1alpha1. The source asks
// discovery at start (retrying until it can tell), watches what is served,
// and asks again every DiscoveryInterval for what is not, starting the
// ServiceExport informer when its CRD appears, and telling the writers
// ([Source.MCS]): installing the CRDs needs no restart.

// servedMCS is what the source found the cluster serves of the MCS kinds.
type servedMCS struct {
	mu      sync.Mutex
	v       MCSVersions
	changed chan struct{} // closed, and replaced, when v changes
}

// MCS returns the versions of the MCS kinds the cluster serves, as the
// source last found them ("" for a kind it does not serve yet), and a
// channel closed when they change. A kind found served stays so; its
// ServiceExports are watched from then on.
func (s *Source) MCS() (MCSVersions, <-chan struct{}) {
	s.mcs.mu.Lock()
	defer s.mcs.mu.Unlock()
	return s.mcs.v, s.mcs.changed
}

func (m *servedMCS) set(v MCSVersions) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v == m.v {
		return
	}
	m.v = v
	close(m.changed)
	m.changed = make(chan struct{})
}

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
	if s.cfg.DiscoverImports && v.Imports == "" {
		s.log.Warn("the cluster serves no MCS ServiceImports; the clusterset's services are not imported until it does",
			"group", mcsv1beta1.GroupName, "recheck_every", s.cfg.DiscoveryInterval)
	}
}

// watchExports returns the ServiceExport informer of a served version,
// its changes queued and its cache in in.
func (s *Source) watchExports(t *transforms, in *caches, version string) (cache.SharedIndexInformer, cache.DoneChecker, error) {
	inf := cache.NewSharedIndexInformerWithOptions(s.api.MCS.Exports(version), &mcsv1beta1.ServiceExport{},
		cache.SharedIndexInformerOptions{})
	reg, err := s.handle(normalize.KindServiceExport, inf, transform(t.serviceExport), unchanged[mcsv1beta1.ServiceExport])
	if err != nil {
		return nil, nil, err
	}
	idx := inf.GetIndexer()
	in.exports.Store(&idx)
	return inf, reg.HasSyncedChecker(), nil
}

// runMCS watches for the MCS kinds the cluster does not serve yet,
// starting the ServiceExport informer when it serves them.
func (s *Source) runMCS(ctx context.Context, g *errgroup.Group, t *transforms, in *caches, v MCSVersions) error {
	var started MCSVersions
	start := func(v MCSVersions) error {
		if v.Exports != "" && started.Exports == "" {
			started.Exports = v.Exports
			if in.exportsIndex() == nil { // not watched from the start
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
		if v.Imports != "" && started.Imports == "" {
			started.Imports = v.Imports
		}
		s.mcs.set(started)
		return nil
	}
	if err := start(v); err != nil {
		return err
	}
	for started.Exports == "" || (s.cfg.DiscoverImports && started.Imports == "") {
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
