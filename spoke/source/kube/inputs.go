package kube

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// indexServiceName indexes EndpointSlices by "<namespace>/<service>", from
// their kubernetes.io/service-name label.
const indexServiceName = "service"

func serviceNameIndex(obj any) ([]string, error) {
	s, ok := obj.(*normalize.EndpointSlice)
	if !ok {
		return nil, nil
	}
	svc := s.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + svc}, nil
}

// caches is the [normalize.Inputs] view over the informers' caches. It
// reads the live caches: it is safe for concurrent use, and an object it
// returns is never modified (the informers replace objects, they do not
// change them), but two calls may see different states.
type caches struct {
	services, slices, pods, nodes, namespaces cache.Indexer
	// exports is set once the cluster serves ServiceExports, which may be
	// after the source started (the CRD installed later).
	exports atomic.Pointer[cache.Indexer]
}

// exportsIndex returns the ServiceExports' cache, nil before the cluster
// serves them.
func (c *caches) exportsIndex() cache.Indexer {
	if p := c.exports.Load(); p != nil {
		return *p
	}
	return nil
}

// Tables are a source's caches, for the packages that read them besides
// normalization (the write-back): safe for concurrent use, and what they
// return is never modified.
type Tables interface {
	normalize.Inputs
	// ServiceExportKeys lists the cached ServiceExports' keys
	// (namespace/name), none while the cluster does not serve them.
	ServiceExportKeys() []string
	// UID returns the uid of a cached Service, EndpointSlice (by its own
	// name) or Pod.
	UID(kind normalize.Kind, namespace, name string) (types.UID, bool)
}

var _ Tables = (*caches)(nil)

func (c *caches) ServiceExportKeys() []string {
	if idx := c.exportsIndex(); idx != nil {
		return idx.ListKeys()
	}
	return nil
}

func (c *caches) UID(kind normalize.Kind, namespace, name string) (types.UID, bool) {
	key := namespace + "/" + name
	switch kind {
	case normalize.KindService:
		if s, ok := get[corev1.Service](c.services, key); ok {
			return s.UID, true
		}
	case normalize.KindEndpointSlice:
		if s, ok := get[normalize.EndpointSlice](c.slices, key); ok {
			return s.UID, true
		}
	case normalize.KindPod:
		if p, ok := get[normalize.Pod](c.pods, key); ok {
			return p.UID, true
		}
	}
	return "", false
}

func get[T any](idx cache.Indexer, key string) (*T, bool) {
	if idx == nil {
		return nil, false
	}
	obj, ok, err := idx.GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	o, ok := obj.(*T)
	return o, ok
}

func typed[T any](objs []any) []*T {
	out := make([]*T, 0, len(objs))
	for _, obj := range objs {
		if o, ok := obj.(*T); ok {
			out = append(out, o)
		}
	}
	return out
}

// list returns a namespace's objects, or every object for "".
func list[T any](idx cache.Indexer, namespace string) []*T {
	if namespace == "" {
		return typed[T](idx.List())
	}
	objs, err := idx.ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return nil
	}
	return typed[T](objs)
}

func (c *caches) Service(namespace, name string) (*corev1.Service, bool) {
	return get[corev1.Service](c.services, namespace+"/"+name)
}

func (c *caches) ServiceExport(namespace, name string) (*mcsv1beta1.ServiceExport, bool) {
	return get[mcsv1beta1.ServiceExport](c.exportsIndex(), namespace+"/"+name)
}

func (c *caches) Pod(namespace, name string) (*normalize.Pod, bool) {
	return get[normalize.Pod](c.pods, namespace+"/"+name)
}

func (c *caches) Node(name string) (*corev1.Node, bool) { return get[corev1.Node](c.nodes, name) }

func (c *caches) Namespace(name string) (*corev1.Namespace, bool) {
	return get[corev1.Namespace](c.namespaces, name)
}

func (c *caches) EndpointSlices(namespace, service string) []*normalize.EndpointSlice {
	objs, err := c.slices.ByIndex(indexServiceName, namespace+"/"+service)
	if err != nil {
		return nil
	}
	return typed[normalize.EndpointSlice](objs)
}

func (c *caches) Services(namespace string) []*corev1.Service {
	return list[corev1.Service](c.services, namespace)
}
