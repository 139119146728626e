package normalize

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Inputs is the read view of one cluster's objects that normalization needs.
// The file source implements it over parsed manifests and the kube source
// over informer caches, so both feed the same shard builder. Implementations
// return objects the caller must not modify.
type Inputs interface {
	Service(namespace, name string) (*corev1.Service, bool)
	ServiceExport(namespace, name string) (*mcsv1beta1.ServiceExport, bool)
	Pod(namespace, name string) (*Pod, bool)
	Node(name string) (*corev1.Node, bool)
	Namespace(name string) (*corev1.Namespace, bool)
	// EndpointSlices returns the slices labelled kubernetes.io/service-name=service.
	EndpointSlices(namespace, service string) []*EndpointSlice
	// Services lists the services of a namespace, or of all namespaces when
	// namespace is "".
	Services(namespace string) []*corev1.Service
}

// Kind is the kind of a changed input object.
type Kind uint8

// The kinds of input objects.
const (
	KindService Kind = iota + 1
	KindServiceExport
	KindEndpointSlice
	KindPod
	KindNode
	KindNamespace
)

// String returns the Kubernetes kind's name.
func (k Kind) String() string {
	switch k {
	case KindService:
		return "Service"
	case KindServiceExport:
		return "ServiceExport"
	case KindEndpointSlice:
		return "EndpointSlice"
	case KindPod:
		return "Pod"
	case KindNode:
		return "Node"
	case KindNamespace:
		return "Namespace"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Change names an input object that was added, updated or deleted. For an
// EndpointSlice, Name is the name of the Service it belongs to (its
// kubernetes.io/service-name label), not the slice's own name: a slice that
// moved between services is reported as two changes.
type Change struct {
	Kind      Kind
	Namespace string // "" for Nodes and Namespaces
	Name      string
}
