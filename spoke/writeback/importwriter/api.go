package importwriter

import (
	"context"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ImportsAPI reads and writes MCS ServiceImports at one version the API
// server serves. Whatever the version, objects are mcs-api's v1beta1 Go
// type: v1alpha1's has the same fields.
type ImportsAPI interface {
	// APIVersion is the served version, as an object's apiVersion
	// ("multicluster.x-k8s.io/v1beta1"), for owner references.
	APIVersion() string
	// ListerWatcher lists and watches the ServiceImports of every
	// namespace that match a label selector; its objects are
	// *mcsv1beta1.ServiceImport.
	ListerWatcher(labelSelector string) cache.ListerWatcher
	Create(ctx context.Context, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error)
	Update(ctx context.Context, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error)
	UpdateStatus(ctx context.Context, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error)
	Delete(ctx context.Context, namespace, name string, pre metav1.Preconditions) error
}

// SlicesAPI reads and writes EndpointSlices (discovery.k8s.io/v1).
type SlicesAPI interface {
	// ListerWatcher lists and watches the slices of every namespace that
	// match a label selector.
	ListerWatcher(labelSelector string) cache.ListerWatcher
	Create(ctx context.Context, s *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error)
	Update(ctx context.Context, s *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error)
	Delete(ctx context.Context, namespace, name string, pre metav1.Preconditions) error
}
