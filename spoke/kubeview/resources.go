package kubeview

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is one kind of object a View serves.
type Resource struct {
	GV schema.GroupVersion
	// Resource is the plural in the path ("pods"); Kind the object's kind.
	Resource, Kind string
	Namespaced     bool
	// fieldNames are the fields a field selector may name besides
	// metadata.name and metadata.namespace, as the API server offers
	// them; fields gives their values.
	fieldNames []string
	fields     func(obj runtime.Object) fields.Set
}

// path is where the resource is listed across namespaces:
// /api/v1/pods, /apis/discovery.k8s.io/v1/endpointslices.
func (r Resource) path() string {
	if r.GV.Group == "" {
		return "/api/" + r.GV.Version + "/" + r.Resource
	}
	return "/apis/" + r.GV.Group + "/" + r.GV.Version + "/" + r.Resource
}

// The resources istiod's informers watch in a remote cluster.
var (
	Namespaces = Resource{GV: corev1.SchemeGroupVersion, Resource: "namespaces", Kind: "Namespace"}
	Nodes      = Resource{GV: corev1.SchemeGroupVersion, Resource: "nodes", Kind: "Node"}
	Pods       = Resource{
		GV: corev1.SchemeGroupVersion, Resource: "pods", Kind: "Pod", Namespaced: true,
		fieldNames: []string{"spec.nodeName", "status.phase", "status.podIP"},
		fields: func(obj runtime.Object) fields.Set {
			p := obj.(*corev1.Pod)
			return fields.Set{"spec.nodeName": p.Spec.NodeName, "status.phase": string(p.Status.Phase), "status.podIP": p.Status.PodIP}
		},
	}
	Services   = Resource{GV: corev1.SchemeGroupVersion, Resource: "services", Kind: "Service", Namespaced: true}
	ConfigMaps = Resource{GV: corev1.SchemeGroupVersion, Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}
	Secrets    = Resource{
		GV: corev1.SchemeGroupVersion, Resource: "secrets", Kind: "Secret", Namespaced: true,
		fieldNames: []string{"type"},
		fields:     func(obj runtime.Object) fields.Set { return fields.Set{"type": string(obj.(*corev1.Secret).Type)} },
	}
	EndpointSlices = Resource{
		GV:       schema.GroupVersion{Group: "discovery.k8s.io", Version: "v1"},
		Resource: "endpointslices", Kind: "EndpointSlice", Namespaced: true,
	}
	// CustomResourceDefinitions tells istiod which optional kinds exist
	// (it watches Gateways once their CRD does); clients read them as
	// metadata.
	CustomResourceDefinitions = Resource{
		GV:       schema.GroupVersion{Group: "apiextensions.k8s.io", Version: "v1"},
		Resource: "customresourcedefinitions", Kind: "CustomResourceDefinition",
	}
	Gateways = Resource{
		GV:       schema.GroupVersion{Group: "gateway.networking.k8s.io", Version: "v1"},
		Resource: "gateways", Kind: "Gateway", Namespaced: true,
	}
)

// Resources are every resource a View serves.
var Resources = []Resource{Namespaces, Nodes, Pods, Services, ConfigMaps, Secrets, EndpointSlices, CustomResourceDefinitions, Gateways}
