package normalize_test

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// fakeInputs is a map-backed normalize.Inputs for tests.
type fakeInputs struct {
	services   map[string]*corev1.Service
	exports    map[string]*mcsv1beta1.ServiceExport
	pods       map[string]*corev1.Pod
	nodes      map[string]*corev1.Node
	namespaces map[string]*corev1.Namespace
	slices     map[string][]*discoveryv1.EndpointSlice
}

var _ normalize.Inputs = (*fakeInputs)(nil)

func inputs(objs ...metav1.Object) *fakeInputs {
	in := &fakeInputs{
		services:   map[string]*corev1.Service{},
		exports:    map[string]*mcsv1beta1.ServiceExport{},
		pods:       map[string]*corev1.Pod{},
		nodes:      map[string]*corev1.Node{},
		namespaces: map[string]*corev1.Namespace{},
		slices:     map[string][]*discoveryv1.EndpointSlice{},
	}
	for _, o := range objs {
		k := o.GetNamespace() + "/" + o.GetName()
		switch o := o.(type) {
		case *corev1.Service:
			in.services[k] = o
		case *mcsv1beta1.ServiceExport:
			in.exports[k] = o
		case *corev1.Pod:
			in.pods[k] = o
		case *corev1.Node:
			in.nodes[o.Name] = o
		case *corev1.Namespace:
			in.namespaces[o.Name] = o
		case *discoveryv1.EndpointSlice:
			svc := o.Namespace + "/" + o.Labels[discoveryv1.LabelServiceName]
			in.slices[svc] = append(in.slices[svc], o)
		default:
			panic("unexpected object type")
		}
	}
	return in
}

func (in *fakeInputs) Service(ns, name string) (*corev1.Service, bool) {
	o, ok := in.services[ns+"/"+name]
	return o, ok
}

func (in *fakeInputs) ServiceExport(ns, name string) (*mcsv1beta1.ServiceExport, bool) {
	o, ok := in.exports[ns+"/"+name]
	return o, ok
}

func (in *fakeInputs) Pod(ns, name string) (*corev1.Pod, bool) {
	o, ok := in.pods[ns+"/"+name]
	return o, ok
}

func (in *fakeInputs) Node(name string) (*corev1.Node, bool) {
	o, ok := in.nodes[name]
	return o, ok
}

func (in *fakeInputs) Namespace(name string) (*corev1.Namespace, bool) {
	o, ok := in.namespaces[name]
	return o, ok
}

func (in *fakeInputs) EndpointSlices(ns, svc string) []*discoveryv1.EndpointSlice {
	return in.slices[ns+"/"+svc]
}

func (in *fakeInputs) Services(ns string) []*corev1.Service { return list(in.services, ns) }

func (in *fakeInputs) Pods(ns string) []*corev1.Pod { return list(in.pods, ns) }

func list[T metav1.Object](m map[string]T, ns string) []T {
	var out []T
	for _, o := range m {
		if ns == "" || o.GetNamespace() == ns {
			out = append(out, o)
		}
	}
	// Reverse order: code under test must not depend on the order.
	slices.SortFunc(out, func(a, b T) int {
		return -cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()), strings.Compare(a.GetName(), b.GetName()))
	})
	return out
}
