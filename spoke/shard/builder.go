package shard

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

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

	// The last good versions of the inputs, to stand in for an object
	// normalization rejects (see [normalize.Rejection]): the Service of
	// each exported service, and the slices its endpoints came from. They
	// are the sources' objects, which sources replace and never change, so
	// keeping one costs a pointer until it is replaced by a bad version.
	lastService map[string]*corev1.Service            // exported service key → its last good Service
	lastSlices  map[string][]*normalize.EndpointSlice // exported service key → its slices in the shard
	rejections  *rejections
	svcRejected map[string][]objectRef // service key → the objects its renormalization rejected
}

// placed is a workload's uid and node, and the pod it is the workload of
// (its last good version).
type placed struct {
	uid, node string
	pod       *normalize.Pod
}

// BuilderOption configures a [Builder].
type BuilderOption func(*builderOptions)

type builderOptions struct {
	metrics  prometheus.Registerer
	reporter Reporter
}

// WithMetrics registers the builder's metrics with reg:
// meshfed_spoke_rejected_objects (a gauge of the objects rejected now) and
// meshfed_spoke_rejections_total, by kind and reason. A nil reg records
// nothing, as without the option.
func WithMetrics(reg prometheus.Registerer) BuilderOption {
	return func(o *builderOptions) { o.metrics = reg }
}

// WithReporter tells r about rejected objects.
func WithReporter(r Reporter) BuilderOption {
	return func(o *builderOptions) { o.reporter = r }
}

// NewBuilder returns a builder writing to t. Its log lines about rejected
// objects name the kind, namespace, name, field and value, but not the
// cluster: log should (the spoke's does).
func NewBuilder(opts normalize.Options, t *Tracker, log *slog.Logger, options ...BuilderOption) *Builder {
	var o builderOptions
	for _, opt := range options {
		opt(&o)
	}
	return &Builder{
		opts: opts.WithDefaults(), t: t, log: log, now: time.Now,
		svcPods: map[string][]string{}, podSvcs: map[string][]string{},
		podWorkload: map[string]placed{},
		lastService: map[string]*corev1.Service{}, lastSlices: map[string][]*normalize.EndpointSlice{},
		rejections:  newRejections(log, o.metrics, o.reporter),
		svcRejected: map[string][]objectRef{},
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
			gateways = gateways || slices.Contains(b.opts.GatewayNamespaces, c.Namespace)
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
// the pods whose workloads it starts or stops referencing. A rejected
// Service or EndpointSlice is replaced by its last good version, if it has
// one, and left out if not.
func (b *Builder) syncService(in normalize.Inputs, w Writer, key string, pods set) {
	ns, name := splitKey(key)
	var found []rejected
	svc, _, err := normalize.Service(in, b.opts, ns, name)
	src := in
	switch rej := normalize.AsRejection(err); {
	case rej != nil:
		kept := false
		if last := b.lastService[key]; last != nil {
			stand := standIns{Inputs: in, namespace: ns, name: name, service: last}
			if s, _, err := normalize.Service(stand, b.opts, ns, name); err == nil && s != nil {
				svc, src, kept = s, stand, true
			}
		}
		if !kept {
			delete(b.lastService, key)
		}
		found = append(found, rejected{*rej, kept})
	case err != nil: // normalization returns nothing else
		b.log.Error("cannot normalize service; leaving it as it is", "service", key, "err", err)
		return
	case svc != nil:
		cur, _ := in.Service(ns, name)
		b.lastService[key] = cur
	default:
		delete(b.lastService, key)
	}

	var eps []*federationpb.Endpoint
	if svc != nil {
		var sliceRejections []rejected
		eps, sliceRejections = b.endpoints(src, key, svc)
		found = append(found, sliceRejections...)
		// Normalization checks what it returns can be encoded: failing
		// here is a bug, and the tracker keeps the versions it has.
		if err := w.PutService(svc); err != nil {
			b.log.Error("service cannot be encoded; the shard keeps its previous version", "service", key, "err", err)
			return
		}
		if err := w.SetEndpoints(key, eps); err != nil {
			b.log.Error("endpoints cannot be encoded; the shard keeps their previous versions", "service", key, "err", err)
		}
	} else {
		w.DeleteService(key)
		delete(b.lastSlices, key)
	}
	if refs := b.rejections.replace(key, b.svcRejected[key], found); len(refs) > 0 {
		b.svcRejected[key] = refs
	} else {
		delete(b.svcRejected, key)
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

// endpoints renormalizes the endpoints of an exported service, with the
// last good version of each rejected slice in its place, and remembers
// the slices they came from.
func (b *Builder) endpoints(in normalize.Inputs, key string, svc *federationpb.Service) ([]*federationpb.Endpoint, []rejected) {
	ns, name := splitKey(key)
	eps, rejs := normalize.Endpoints(in, b.opts, svc)
	var good []*normalize.EndpointSlice
	for _, s := range in.EndpointSlices(ns, name) {
		if !slices.ContainsFunc(rejs, func(r *normalize.Rejection) bool { return r.Name == s.Name }) {
			good = append(good, s)
		}
	}
	stand := standIns{Inputs: in, namespace: ns, name: name}
	for _, r := range rejs {
		if i := slices.IndexFunc(b.lastSlices[key], func(s *normalize.EndpointSlice) bool { return s.Name == r.Name }); i >= 0 {
			if stand.slices == nil {
				stand.slices = map[string]*normalize.EndpointSlice{}
			}
			stand.slices[r.Name] = b.lastSlices[key][i]
		}
	}
	if len(stand.slices) > 0 {
		var again []*normalize.Rejection
		eps, again = normalize.Endpoints(stand, b.opts, svc)
		for _, r := range again {
			// A last good version the objects it refers to have made bad.
			delete(stand.slices, r.Name)
		}
		for _, s := range stand.slices {
			good = append(good, s)
		}
	}
	if len(good) > 0 {
		b.lastSlices[key] = good
	} else {
		delete(b.lastSlices, key)
	}
	out := make([]rejected, len(rejs))
	for i, r := range rejs {
		_, kept := stand.slices[r.Name]
		out[i] = rejected{*r, kept}
	}
	return eps, out
}

// syncWorkload renormalizes the workload of one pod: present while some
// exported service's endpoint references the pod. A rejected pod's last
// good version stands in for it.
func (b *Builder) syncWorkload(in normalize.Inputs, w Writer, key string) {
	ns, name := splitKey(key)
	old, had := b.podWorkload[key]
	var wl *federationpb.Workload
	var good *normalize.Pod
	var found *rejected
	if len(b.podSvcs[key]) > 0 {
		if pod, ok := in.Pod(ns, name); ok {
			var err error
			wl, err = normalize.Workload(in, b.opts, pod)
			good = pod
			if err != nil {
				wl, good = nil, nil
				if had && old.pod != nil {
					if last, err := normalize.Workload(in, b.opts, old.pod); err == nil && last != nil {
						wl, good = last, old.pod
					}
				}
				if rej := normalize.AsRejection(err); rej != nil {
					found = &rejected{*rej, wl != nil}
				} else {
					b.log.Error("cannot normalize pod", "pod", key, "err", err)
				}
			}
		}
	}
	if found != nil {
		b.rejections.reject(*found)
	} else {
		b.rejections.accept(objectRef{normalize.KindPod, ns, name}, "")
	}
	if had && (wl == nil || wl.GetUid() != old.uid) {
		w.DeleteWorkload(old.uid)
		delete(b.podWorkload, key)
	}
	if wl == nil {
		return
	}
	if err := w.PutWorkload(wl); err != nil {
		// Normalization checks what it returns can be encoded: a bug.
		b.log.Error("workload cannot be encoded; the shard keeps its previous version", "pod", key, "err", err)
		return
	}
	b.podWorkload[key] = placed{wl.GetUid(), wl.GetNode(), good}
}

// standIns is Inputs with the last good versions of one service's rejected
// objects in their place.
type standIns struct {
	normalize.Inputs
	namespace, name string
	service         *corev1.Service                     // nil: the current one
	slices          map[string]*normalize.EndpointSlice // by slice name
}

func (s standIns) Service(namespace, name string) (*corev1.Service, bool) {
	if s.service != nil && namespace == s.namespace && name == s.name {
		return s.service, true
	}
	return s.Inputs.Service(namespace, name)
}

func (s standIns) EndpointSlices(namespace, service string) []*normalize.EndpointSlice {
	out := s.Inputs.EndpointSlices(namespace, service)
	if len(s.slices) == 0 || namespace != s.namespace || service != s.name {
		return out
	}
	out = slices.Clone(out)
	for i, cur := range out {
		if last, ok := s.slices[cur.Name]; ok {
			out[i] = last
		}
	}
	return out
}
