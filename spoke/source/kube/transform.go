package kube

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

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

// transforms holds the allow-lists, computed once.
type transforms struct {
	serviceKeys, podKeys, nodeKeys, namespaceKeys, sliceKeys, exportKeys keys
}

func newTransforms() *transforms {
	return &transforms{
		serviceKeys:   keysOf(normalize.KindService),
		podKeys:       keysOf(normalize.KindPod),
		nodeKeys:      keysOf(normalize.KindNode),
		namespaceKeys: keysOf(normalize.KindNamespace),
		sliceKeys:     keysOf(normalize.KindEndpointSlice),
		exportKeys:    keysOf(normalize.KindServiceExport),
	}
}

// transform adapts a typed transform to client-go's.
func transform[T any](fn func(*T) *T) cache.TransformFunc {
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
		Labels:            only(m.Labels, k.labels),
		Annotations:       only(m.Annotations, k.annotations),
	}
}

// only returns the entries of m under keys, or nil when there are none.
func only(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}

func (t *transforms) service(in *corev1.Service) *corev1.Service {
	out := &corev1.Service{
		ObjectMeta: objectMeta(&in.ObjectMeta, t.serviceKeys),
		Spec: corev1.ServiceSpec{
			Type:        in.Spec.Type,
			ClusterIP:   in.Spec.ClusterIP,
			ClusterIPs:  in.Spec.ClusterIPs,
			ExternalIPs: in.Spec.ExternalIPs,
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

// pod keeps the controller reference (a workload's canonical name), the
// service account, node and host network, the phase, IPs and readiness.
func (t *transforms) pod(in *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: objectMeta(&in.ObjectMeta, t.podKeys),
		Spec: corev1.PodSpec{
			ServiceAccountName: in.Spec.ServiceAccountName,
			NodeName:           in.Spec.NodeName,
			HostNetwork:        in.Spec.HostNetwork,
		},
		Status: corev1.PodStatus{
			Phase:  in.Status.Phase,
			PodIP:  in.Status.PodIP,
			PodIPs: in.Status.PodIPs,
		},
	}
	if ref := metav1.GetControllerOfNoCopy(in); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: ref.Controller,
		}}
	}
	for _, c := range in.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			break
		}
	}
	return out
}

func (t *transforms) node(in *corev1.Node) *corev1.Node {
	return &corev1.Node{ObjectMeta: objectMeta(&in.ObjectMeta, t.nodeKeys)}
}

func (t *transforms) namespace(in *corev1.Namespace) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: objectMeta(&in.ObjectMeta, t.namespaceKeys)}
}

// endpointSlice keeps the ports and, of each endpoint, the first address
// (the only one used), conditions, hostname, node, zone and target.
func (t *transforms) endpointSlice(in *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  objectMeta(&in.ObjectMeta, t.sliceKeys),
		AddressType: in.AddressType,
		Ports:       in.Ports,
	}
	if len(in.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(in.Endpoints))
		for i := range in.Endpoints {
			e := &in.Endpoints[i]
			o := discoveryv1.Endpoint{
				Addresses:  e.Addresses,
				Conditions: e.Conditions,
				Hostname:   e.Hostname,
				NodeName:   e.NodeName,
				Zone:       e.Zone,
			}
			if len(o.Addresses) > 1 { // a new array: the old one would keep every address
				o.Addresses = []string{o.Addresses[0]}
			}
			if r := e.TargetRef; r != nil {
				o.TargetRef = &corev1.ObjectReference{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
			}
			out.Endpoints[i] = o
		}
	}
	return out
}

// serviceExport keeps the whole status: a status update replaces it, so
// the conditions other controllers set (Ready, Conflict) must survive.
func (t *transforms) serviceExport(in *mcsv1alpha1.ServiceExport) *mcsv1alpha1.ServiceExport {
	return &mcsv1alpha1.ServiceExport{
		ObjectMeta: objectMeta(&in.ObjectMeta, t.exportKeys),
		Status:     in.Status,
	}
}
