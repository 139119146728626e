package shard

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
)

type set = map[string]struct{}

// Builder renormalizes the parts of a cluster that changed and writes the
// result to a Tracker, and writes the whole shard anew when the tracker
// asks for it (see [Builder.Run]). Apply and Run may run concurrently.
type Builder struct {
	opts normalize.Options
	t    *Tracker
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	in      normalize.Inputs // the last Apply's
	started bool
	network string

	// The pods each exported service's endpoints reference, so that a Pod
	// change renormalizes exactly the services it affects. A pod is behind
	// one service or a few: its services are a slice, not a set (a map per
	// pod would cost as much as its workload). Node changes are not
	// indexed: they are rare (the caches drop status-only updates), and
	// finding what is on a node scans the shard's endpoints and workloads
	// once, where indexes would cost every pod ~100 bytes for good.
	svcPods map[string][]string // exported service key with endpoints → pod keys
	podSvcs map[string][]string // pod key → service keys, without duplicates

	// Workloads are the pods behind exported services' endpoints.
	podWorkload map[string]placed // pod key → its workload in the shard
}

// placed is a workload's uid and node.
type placed struct{ uid, node string }

// NewBuilder returns a builder writing to t.
func NewBuilder(opts normalize.Options, t *Tracker, log *slog.Logger) *Builder {
	return &Builder{
		opts: opts.WithDefaults(), t: t, log: log, now: time.Now,
		svcPods: map[string][]string{}, podSvcs: map[string][]string{},
		podWorkload: map[string]placed{},
	}
}

// Run writes the whole shard anew, from the last Apply's inputs, each time
// the tracker asks ([Tracker.Resync]), until ctx ends; it returns nil then.
func (b *Builder) Run(ctx context.Context) error {
	b.t.AnswerResyncs(ctx, b.resync)
	return nil
}

// Apply brings the shard up to date with in, given what changed since the
// previous call. The first call (and any call that changes the cluster's
// network) renormalizes everything.
func (b *Builder) Apply(in normalize.Inputs, changes []normalize.Change) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.in = in
	b.t.Update(b.now(), true, func(w Writer) { b.apply(in, changes, w, false) })
}

// resync writes the whole shard anew from the last Apply's inputs.
func (b *Builder) resync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.in == nil {
		return // nothing applied: the tracker is not synced either
	}
	b.t.Update(b.now(), false, func(w Writer) {
		w.Reset()
		b.apply(b.in, nil, w, true)
	})
}

// apply renormalizes what changes touch, or everything when all is set
// (or the cluster's network changed).
func (b *Builder) apply(in normalize.Inputs, changes []normalize.Change, w Writer, all bool) {
	services, pods := set{}, set{}
	network := normalize.ClusterNetwork(in, b.opts)
	gateways := !b.started || all
	if !b.started || all || network != b.network {
		// Everything: what changed is in it.
		b.network = network
		for _, s := range in.Services("") {
			services[s.Namespace+"/"+s.Name] = struct{}{}
		}
		for k := range b.svcPods {
			services[k] = struct{}{}
		}
		for k := range b.podWorkload {
			pods[k] = struct{}{}
		}
		changes = nil
	}
	b.started = true
	for _, c := range changes {
		key := c.Namespace + "/" + c.Name
		switch c.Kind {
		case normalize.KindService:
			services[key] = struct{}{}
			gateways = true
		case normalize.KindServiceExport, normalize.KindEndpointSlice:
			services[key] = struct{}{}
		case normalize.KindPod:
			for _, s := range b.podSvcs[key] {
				services[s] = struct{}{}
			}
			pods[key] = struct{}{}
		case normalize.KindNode:
			b.onNode(in, c.Name, services, pods)
		case normalize.KindNamespace:
			// Its network label may retag the namespace's endpoints and workloads.
			for _, s := range in.Services(c.Name) {
				services[s.Namespace+"/"+s.Name] = struct{}{}
			}
			for k := range b.podWorkload {
				if ns, _ := splitKey(k); ns == c.Name {
					pods[k] = struct{}{}
				}
			}
			gateways = gateways || c.Name == b.opts.SystemNamespace
		}
	}
	for key := range services {
		b.syncService(in, w, key, pods)
	}
	for key := range pods {
		b.syncWorkload(in, w, key)
	}
	if gateways || w.Cluster() == nil || w.Cluster().GetNetwork() != network {
		b.syncCluster(in, w, network)
	}
}

// onNode adds to services and pods those whose endpoints or workloads are
// on node: its labels are their locality.
func (b *Builder) onNode(in normalize.Inputs, node string, services, pods set) {
	for key := range b.svcPods {
		ns, name := splitKey(key)
		if slices.ContainsFunc(in.EndpointSlices(ns, name), func(s *normalize.EndpointSlice) bool {
			return slices.ContainsFunc(s.Endpoints, func(e normalize.SliceEndpoint) bool { return e.Node == node })
		}) {
			services[key] = struct{}{}
		}
	}
	for key, p := range b.podWorkload {
		if p.node == node {
			pods[key] = struct{}{}
		}
	}
}

func splitKey(key string) (namespace, name string) {
	if namespace, name, ok := strings.Cut(key, "/"); ok {
		return namespace, name
	}
	return "", key
}

func (b *Builder) syncCluster(in normalize.Inputs, w Writer, network string) {
	c := &federationpb.Cluster{
		Id:          b.opts.ClusterID,
		Network:     network,
		TrustDomain: b.opts.TrustDomain,
		Gateways:    normalize.Gateways(in, b.opts),
	}
	if err := federation.ValidateCluster(c); err != nil {
		b.log.Error("cluster facts are invalid; keeping the previous ones", "err", err)
		return
	}
	w.SetCluster(c)
}

// syncService renormalizes one service and its endpoints, and adds to pods
// the pods whose workloads it starts or stops referencing.
func (b *Builder) syncService(in normalize.Inputs, w Writer, key string, pods set) {
	ns, name := splitKey(key)
	svc, _ := normalize.Service(in, b.opts, ns, name)
	if svc != nil {
		if err := federation.ValidateService(svc); err != nil {
			b.log.Warn("service not exported: it fails validation", "service", key, "err", err)
			svc = nil
		}
	}
	var eps []*federationpb.Endpoint
	if svc != nil {
		for _, e := range normalize.Endpoints(in, b.opts, svc) {
			if err := federation.ValidateEndpoint(e); err != nil {
				b.log.Warn("endpoint skipped: it fails validation", "service", key, "err", err)
				continue
			}
			eps = append(eps, e)
		}
		if err := w.PutService(svc); err != nil {
			b.log.Warn("service not exported: it cannot be encoded", "err", err)
			eps = nil
		} else if err := w.SetEndpoints(key, eps); err != nil {
			b.log.Warn("endpoints skipped: they cannot be encoded", "err", err)
		}
	} else {
		w.DeleteService(key)
	}

	var podKeys []string
	for _, e := range eps {
		if ref := e.GetWorkload(); ref.GetKind() == "Pod" && ref.GetName() != "" {
			podKeys = append(podKeys, e.GetNamespace()+"/"+ref.GetName())
		}
	}
	for _, p := range b.svcPods[key] {
		if svcs := slices.DeleteFunc(b.podSvcs[p], func(s string) bool { return s == key }); len(svcs) > 0 {
			b.podSvcs[p] = svcs
		} else {
			delete(b.podSvcs, p)
		}
		pods[p] = struct{}{}
	}
	for _, p := range podKeys {
		if svcs := b.podSvcs[p]; !slices.Contains(svcs, key) {
			b.podSvcs[p] = append(svcs, key)
		}
		pods[p] = struct{}{}
	}
	if len(eps) == 0 {
		delete(b.svcPods, key)
	} else {
		b.svcPods[key] = podKeys
	}
}

// syncWorkload renormalizes the workload of one pod: present while some
// exported service's endpoint references the pod.
func (b *Builder) syncWorkload(in normalize.Inputs, w Writer, key string) {
	var wl *federationpb.Workload
	if len(b.podSvcs[key]) > 0 {
		ns, name := splitKey(key)
		if pod, ok := in.Pod(ns, name); ok {
			wl = normalize.Workload(in, b.opts, pod)
		}
		if wl != nil {
			if err := federation.ValidateWorkload(wl); err != nil {
				b.log.Warn("workload skipped: it fails validation", "pod", key, "err", err)
				wl = nil
			}
		}
	}
	old, ok := b.podWorkload[key]
	if ok && (wl == nil || wl.GetUid() != old.uid) {
		w.DeleteWorkload(old.uid)
		delete(b.podWorkload, key)
	}
	if wl == nil {
		return
	}
	if err := w.PutWorkload(wl); err != nil {
		b.log.Warn("workload skipped: it cannot be encoded", "pod", key, "err", err)
		delete(b.podWorkload, key)
		return
	}
	b.podWorkload[key] = placed{wl.GetUid(), wl.GetNode()}
}
