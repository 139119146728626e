package kube

import (
	"maps"
	"slices"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// The informers' transforms. Each builds a new object holding only what
// normalization reads (an allow-list, so that fields Kubernetes adds later
// stay out of the caches) and lets the decoded object go: managedFields,
// Pod specs and container statuses, Node statuses and images never reach a
// cache. Labels and annotations are those of [normalize.Keys]. Every
// transform is idempotent, as client-go requires, and passes objects of
// other types (tombstones) through unchanged.
//
// TestTransformKeepsWhatNormalizeReads normalizes objects before and after
// their transform and compares the federation output.

// keys are the labels and annotations kept for one kind.
type keys struct{ labels, annotations []string }

func keysOf(k normalize.Kind) keys {
	l, a := normalize.Keys(k)
	return keys{l, a}
}

// transforms holds the allow-lists, computed once, and the label sets
// and strings pods and endpoints share.
type transforms struct {
	serviceKeys, nodeKeys, namespaceKeys, exportKeys keys
	podLabels                                        *labelSets
	strings                                          *lru.Cache[string, string]
}

func newTransforms() *transforms {
	strs, err := lru.New[string, string](sharedStrings)
	if err != nil {
		panic(err) // only for a size < 1
	}
	return &transforms{
		serviceKeys:   keysOf(normalize.KindService),
		nodeKeys:      keysOf(normalize.KindNode),
		namespaceKeys: keysOf(normalize.KindNamespace),
		exportKeys:    keysOf(normalize.KindServiceExport),
		podLabels:     newLabelSets(podLabelSets),
		strings:       strs,
	}
}

// podLabelSets bounds the distinct pod label and annotation sets shared;
// a cluster has about one per Deployment revision.
const podLabelSets = 4096

// sharedStrings bounds the distinct strings pods and endpoints share:
// namespaces, nodes, zones, service accounts, controllers.
const sharedStrings = 16384

// share returns a string equal to s that may be shared. The decoder gives
// every field of every object its own copy, and 100,000 pods and endpoints
// name a few hundred nodes, namespaces and zones. A string not used lately
// may be dropped from the table; the objects holding it keep it.
func (t *transforms) share(s string) string {
	if s == "" {
		return ""
	}
	if shared, ok := t.strings.Get(s); ok {
		return shared
	}
	t.strings.Add(s, s)
	return s
}

// labelSets shares equal label (or annotation) maps between the objects
// holding them: the pods of one ReplicaSet have the same allow-listed
// labels, and a map costs 300 bytes or more. Cached objects are never
// modified, so a shared map is safe. A set not used lately may be dropped
// from the table; the objects holding it keep it.
type labelSets struct {
	sets *lru.Cache[string, map[string]string]
}

func newLabelSets(size int) *labelSets {
	c, err := lru.New[string, map[string]string](size)
	if err != nil {
		panic(err) // only for a size < 1
	}
	return &labelSets{c}
}

// share returns a map equal to m that may be shared, nil for an empty m.
func (l *labelSets) share(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
	if shared, ok := l.sets.Get(key); ok {
		return shared
	}
	l.sets.Add(key, m)
	return m
}

// transform adapts a typed transform to client-go's.
func transform[T, U any](fn func(*T) *U) cache.TransformFunc {
	return func(obj any) (any, error) {
		if o, ok := obj.(*T); ok {
			return fn(o), nil
		}
		return obj, nil
	}
}

// objectMeta keeps identity, the times normalization reads, and the
// allow-listed labels and annotations. ResourceVersion stays for status
// updates (optimistic concurrency) and debugging.
func objectMeta(m *metav1.ObjectMeta, k keys) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            normalize.Only(m.Labels, k.labels),
		Annotations:       normalize.Only(m.Annotations, k.annotations),
	}
}

func (t *transforms) service(in *corev1.Service) *corev1.Service {
	out := &corev1.Service{
		ObjectMeta: objectMeta(&in.ObjectMeta, t.serviceKeys),
		Spec: corev1.ServiceSpec{
			Type:        in.Spec.Type,
			ClusterIP:   in.Spec.ClusterIP,
			ClusterIPs:  in.Spec.ClusterIPs,
			ExternalIPs: in.Spec.ExternalIPs,
			// What an MCS import copies from the oldest export.
			SessionAffinity:       in.Spec.SessionAffinity,
			SessionAffinityConfig: in.Spec.SessionAffinityConfig,
			InternalTrafficPolicy: in.Spec.InternalTrafficPolicy,
			TrafficDistribution:   in.Spec.TrafficDistribution,
			IPFamilies:            in.Spec.IPFamilies,
		},
	}
	if len(in.Spec.Ports) > 0 {
		out.Spec.Ports = make([]corev1.ServicePort, len(in.Spec.Ports))
		for i, p := range in.Spec.Ports {
			out.Spec.Ports[i] = corev1.ServicePort{
				Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port, TargetPort: p.TargetPort,
			}
		}
	}
	if ing := in.Status.LoadBalancer.Ingress; len(ing) > 0 {
		out.Status.LoadBalancer.Ingress = make([]corev1.LoadBalancerIngress, len(ing))
		for i, g := range ing {
			out.Status.LoadBalancer.Ingress[i] = corev1.LoadBalancerIngress{IP: g.IP, Hostname: g.Hostname}
		}
	}
	return out
}

// pod keeps what normalization reads of a Pod, with the label and
// annotation maps shared between pods.
func (t *transforms) pod(in *corev1.Pod) *normalize.Pod {
	p := normalize.PodOf(in)
	p.Labels = t.podLabels.share(p.Labels)
	p.Annotations = t.podLabels.share(p.Annotations)
	p.Namespace = t.share(p.Namespace)
	p.Node = t.share(p.Node)
	p.ServiceAccount = t.share(p.ServiceAccount)
	p.ControllerKind = t.share(p.ControllerKind)
	p.ControllerName = t.share(p.ControllerName)
	p.Phase = corev1.PodPhase(t.share(string(p.Phase)))
	return p
}

func (t *transforms) node(in *corev1.Node) *corev1.Node {
	return &corev1.Node{ObjectMeta: objectMeta(&in.ObjectMeta, t.nodeKeys)}
}

func (t *transforms) namespace(in *corev1.Namespace) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: objectMeta(&in.ObjectMeta, t.namespaceKeys)}
}

// endpointSlice keeps what normalization reads of a slice, with the
// strings endpoints repeat shared.
func (t *transforms) endpointSlice(in *discoveryv1.EndpointSlice) *normalize.EndpointSlice {
	s := normalize.EndpointSliceOf(in)
	s.Namespace = t.share(s.Namespace)
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		e.Node = t.share(e.Node)
		e.Zone = t.share(e.Zone)
		e.Target.Kind = t.share(e.Target.Kind)
		e.Target.Namespace = t.share(e.Target.Namespace)
	}
	return s
}

// serviceExport keeps the exported labels and annotations, and the whole
// status: a status update replaces it, so the conditions other
// controllers set must survive.
func (t *transforms) serviceExport(in *mcsv1beta1.ServiceExport) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{
		ObjectMeta: objectMeta(&in.ObjectMeta, t.exportKeys),
		Spec:       in.Spec,
		Status:     in.Status,
	}
}
