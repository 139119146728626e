package file

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// snapshot is an immutable [normalize.Inputs] over one reload's objects.
// Objects of a kind are kept in one slice sorted by namespace and name:
// lookups are binary searches and a namespace's objects are a subslice,
// so the only extra index is the one from services to EndpointSlices.
type snapshot struct {
	services   sortedObjects[*corev1.Service]
	exports    sortedObjects[*mcsv1beta1.ServiceExport]
	pods       sortedObjects[*normalize.Pod]
	nodes      sortedObjects[*corev1.Node]
	namespaces sortedObjects[*corev1.Namespace]
	// EndpointSlices by namespace and kubernetes.io/service-name.
	endpointSlices map[serviceRef][]*normalize.EndpointSlice
}

var _ normalize.Inputs = (*snapshot)(nil)

type serviceRef struct{ namespace, name string }

func newSnapshot(objects map[key]metav1.Object) *snapshot {
	s := &snapshot{endpointSlices: map[serviceRef][]*normalize.EndpointSlice{}}
	for k, o := range objects {
		switch o := o.(type) {
		case *corev1.Service:
			s.services = append(s.services, o)
		case *mcsv1beta1.ServiceExport:
			s.exports = append(s.exports, o)
		case *corev1.Pod:
			s.pods = append(s.pods, normalize.PodOf(o))
		case *corev1.Node:
			s.nodes = append(s.nodes, o)
		case *corev1.Namespace:
			s.namespaces = append(s.namespaces, o)
		case *discoveryv1.EndpointSlice:
			if svc := o.Labels[discoveryv1.LabelServiceName]; svc != "" {
				ref := serviceRef{k.namespace, svc}
				s.endpointSlices[ref] = append(s.endpointSlices[ref], normalize.EndpointSliceOf(o))
			}
		}
	}
	s.services.sort()
	s.exports.sort()
	s.pods.sort()
	s.nodes.sort()
	s.namespaces.sort()
	for _, eps := range s.endpointSlices {
		slices.SortFunc(eps, func(a, b *normalize.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	}
	return s
}

func (s *snapshot) Service(namespace, name string) (*corev1.Service, bool) {
	return s.services.get(namespace, name)
}

func (s *snapshot) ServiceExport(namespace, name string) (*mcsv1beta1.ServiceExport, bool) {
	return s.exports.get(namespace, name)
}

func (s *snapshot) Pod(namespace, name string) (*normalize.Pod, bool) {
	return s.pods.get(namespace, name)
}

func (s *snapshot) Node(name string) (*corev1.Node, bool) { return s.nodes.get("", name) }

func (s *snapshot) Namespace(name string) (*corev1.Namespace, bool) {
	return s.namespaces.get("", name)
}

func (s *snapshot) EndpointSlices(namespace, service string) []*normalize.EndpointSlice {
	return slices.Clip(s.endpointSlices[serviceRef{namespace, service}])
}

func (s *snapshot) Services(namespace string) []*corev1.Service { return s.services.list(namespace) }

func (s *snapshot) Pods(namespace string) []*normalize.Pod { return s.pods.list(namespace) }

// sortedObjects is a slice of objects sorted by namespace, then name.
type sortedObjects[T metav1.Object] []T

func compareObjects[T metav1.Object](a, b T) int {
	return cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()), strings.Compare(a.GetName(), b.GetName()))
}

func (s sortedObjects[T]) sort() { slices.SortFunc(s, compareObjects[T]) }

func (s sortedObjects[T]) get(namespace, name string) (T, bool) {
	i, ok := slices.BinarySearchFunc(s, [2]string{namespace, name}, func(o T, t [2]string) int {
		return cmp.Or(strings.Compare(o.GetNamespace(), t[0]), strings.Compare(o.GetName(), t[1]))
	})
	if !ok {
		var zero T
		return zero, false
	}
	return s[i], true
}

// list returns the objects of a namespace, or all of them for "". The
// result is clipped so that a caller's append cannot write into s.
func (s sortedObjects[T]) list(namespace string) []T {
	if namespace == "" {
		return slices.Clip(s)
	}
	byNamespace := func(o T, ns string) int { return strings.Compare(o.GetNamespace(), ns) }
	lo, _ := slices.BinarySearchFunc(s, namespace, byNamespace)
	hi := lo
	for hi < len(s) && s[hi].GetNamespace() == namespace {
		hi++
	}
	return slices.Clip(s[lo:hi])
}

// diff returns the changes from old to cur, sorted and without duplicates.
// An EndpointSlice change names its service, before and after.
func diff(old, cur map[key]metav1.Object) []normalize.Change {
	var changes []normalize.Change
	add := func(k key, o metav1.Object) {
		if k.kind != normalize.KindEndpointSlice {
			changes = append(changes, normalize.Change{Kind: k.kind, Namespace: k.namespace, Name: k.name})
			return
		}
		if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
			changes = append(changes, normalize.Change{Kind: k.kind, Namespace: k.namespace, Name: svc})
		}
	}
	for k, o := range cur {
		prev, ok := old[k]
		switch {
		case !ok:
			add(k, o)
		case prev == o: // unchanged file: the same object
		case !equality.Semantic.DeepEqual(prev, o):
			add(k, prev)
			add(k, o)
		}
	}
	for k, o := range old {
		if _, ok := cur[k]; !ok {
			add(k, o)
		}
	}
	slices.SortFunc(changes, func(a, b normalize.Change) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return slices.Compact(changes)
}
