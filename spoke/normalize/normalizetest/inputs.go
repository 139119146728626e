// Package normalizetest provides a map-backed normalize.Inputs for tests of
// the packages that normalize.
package normalizetest

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

// Inputs is a map-backed normalize.Inputs. Tests may change the objects
// it holds in place, unless the code under test keeps them (see Put);
// Delete removes one.
type Inputs struct {
	services   map[string]*corev1.Service
	exports    map[string]*mcsv1beta1.ServiceExport
	pods       map[string]*corev1.Pod
	podInfos   map[string]*normalize.Pod // given as such (a kube source's cache holds these)
	nodes      map[string]*corev1.Node
	namespaces map[string]*corev1.Namespace
	slices     map[string][]*discoveryv1.EndpointSlice
	sliceInfos map[string][]*normalize.EndpointSlice // given as such
}

var _ normalize.Inputs = (*Inputs)(nil)

// NewInputs returns Inputs holding objs (Services, ServiceExports, Pods or
// normalize.Pods, Nodes, Namespaces, and EndpointSlices or
// normalize.EndpointSlices); it panics on other types.
func NewInputs(objs ...metav1.Object) *Inputs {
	in := &Inputs{
		services:   map[string]*corev1.Service{},
		exports:    map[string]*mcsv1beta1.ServiceExport{},
		pods:       map[string]*corev1.Pod{},
		podInfos:   map[string]*normalize.Pod{},
		nodes:      map[string]*corev1.Node{},
		namespaces: map[string]*corev1.Namespace{},
		slices:     map[string][]*discoveryv1.EndpointSlice{},
		sliceInfos: map[string][]*normalize.EndpointSlice{},
	}
	in.add(objs...)
	return in
}

// Put adds objs, replacing the objects of the same kind and name. Code that
// keeps an object it was given (a shard builder keeps the last good
// version of each) sees a change only this way, as it would with a
// source: sources replace objects, they do not change them.
func (in *Inputs) Put(objs ...metav1.Object) {
	for _, o := range objs {
		in.Delete(o)
	}
	in.add(objs...)
}

func (in *Inputs) add(objs ...metav1.Object) {
	for _, o := range objs {
		k := o.GetNamespace() + "/" + o.GetName()
		switch o := o.(type) {
		case *corev1.Service:
			in.services[k] = o
		case *mcsv1beta1.ServiceExport:
			in.exports[k] = o
		case *corev1.Pod:
			in.pods[k] = o
		case *normalize.Pod:
			in.podInfos[k] = o
		case *corev1.Node:
			in.nodes[o.Name] = o
		case *corev1.Namespace:
			in.namespaces[o.Name] = o
		case *discoveryv1.EndpointSlice:
			svc := o.Namespace + "/" + o.Labels[discoveryv1.LabelServiceName]
			in.slices[svc] = append(in.slices[svc], o)
		case *normalize.EndpointSlice:
			svc := o.Namespace + "/" + o.Labels[discoveryv1.LabelServiceName]
			in.sliceInfos[svc] = append(in.sliceInfos[svc], o)
		default:
			panic("unexpected object type")
		}
	}
}

// Service implements normalize.Inputs.
func (in *Inputs) Service(ns, name string) (*corev1.Service, bool) {
	o, ok := in.services[ns+"/"+name]
	return o, ok
}

// ServiceExport implements normalize.Inputs.
func (in *Inputs) ServiceExport(ns, name string) (*mcsv1beta1.ServiceExport, bool) {
	o, ok := in.exports[ns+"/"+name]
	return o, ok
}

// Pod implements normalize.Inputs.
// A corev1.Pod is read afresh on each call, so that tests may change it.
func (in *Inputs) Pod(ns, name string) (*normalize.Pod, bool) {
	if o, ok := in.pods[ns+"/"+name]; ok {
		return normalize.PodOf(o), true
	}
	o, ok := in.podInfos[ns+"/"+name]
	return o, ok
}

// Node implements normalize.Inputs.
func (in *Inputs) Node(name string) (*corev1.Node, bool) {
	o, ok := in.nodes[name]
	return o, ok
}

// Namespace implements normalize.Inputs.
func (in *Inputs) Namespace(name string) (*corev1.Namespace, bool) {
	o, ok := in.namespaces[name]
	return o, ok
}

// EndpointSlices implements normalize.Inputs.
// A discoveryv1.EndpointSlice is read afresh on each call, so that tests
// may change it.
func (in *Inputs) EndpointSlices(ns, svc string) []*normalize.EndpointSlice {
	out := slices.Clone(in.sliceInfos[ns+"/"+svc])
	for _, s := range in.slices[ns+"/"+svc] {
		out = append(out, normalize.EndpointSliceOf(s))
	}
	return out
}

// Services implements normalize.Inputs.
func (in *Inputs) Services(ns string) []*corev1.Service { return list(in.services, ns) }

// Pods lists the Pods of a namespace, or of all for "" (not those given as
// normalize.Pods).
func (in *Inputs) Pods(ns string) []*corev1.Pod { return list(in.pods, ns) }

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

// Delete removes an object added by NewInputs.
func (in *Inputs) Delete(o metav1.Object) {
	k := o.GetNamespace() + "/" + o.GetName()
	switch o := o.(type) {
	case *corev1.Service:
		delete(in.services, k)
	case *mcsv1beta1.ServiceExport:
		delete(in.exports, k)
	case *corev1.Pod:
		delete(in.pods, k)
	case *normalize.Pod:
		delete(in.podInfos, k)
	case *corev1.Node:
		delete(in.nodes, o.Name)
	case *corev1.Namespace:
		delete(in.namespaces, o.Name)
	case *discoveryv1.EndpointSlice:
		svc := o.Namespace + "/" + o.Labels[discoveryv1.LabelServiceName]
		in.slices[svc] = slices.DeleteFunc(in.slices[svc], func(s *discoveryv1.EndpointSlice) bool { return s.Name == o.Name })
	case *normalize.EndpointSlice:
		svc := o.Namespace + "/" + o.Labels[discoveryv1.LabelServiceName]
		in.sliceInfos[svc] = slices.DeleteFunc(in.sliceInfos[svc], func(s *normalize.EndpointSlice) bool { return s.Name == o.Name })
	}
}
