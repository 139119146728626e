package writeback

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/kubeclient"
	"github.com/meshfed/meshfed/spoke/writeback/importwriter"
)

// API is what the write-back writes of a cluster's Kubernetes API (and
// reads of what it writes). [NewAPI] builds it over package kubeclient's
// REST clients. A nil field writes nothing of its kind.
type API struct {
	Events EventsAPI
	// Exports writes ServiceExport status at a served version.
	Exports func(version string) ExportsAPI
	// Imports writes ServiceImports at a served version, Slices their
	// EndpointSlices.
	Imports func(version string) importwriter.ImportsAPI
	Slices  importwriter.SlicesAPI
}

// EventsAPI records Kubernetes Events (core v1).
type EventsAPI interface {
	Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
}

// ExportsAPI writes the status of MCS ServiceExports at one version.
// Objects are mcs-api's v1beta1 Go type whatever the version.
type ExportsAPI interface {
	// UpdateStatus writes se's status and returns the stored object.
	UpdateStatus(ctx context.Context, se *mcsv1beta1.ServiceExport) (*mcsv1beta1.ServiceExport, error)
}

// NewAPI returns the API of the server the clients talk to.
func NewAPI(c *kubeclient.Clients) API {
	return API{
		Events:  restEvents{c.Core},
		Exports: func(version string) ExportsAPI { return restExports{c.Exports[version]} },
		Imports: func(version string) importwriter.ImportsAPI {
			return restImports{c.Imports[version], mcsv1beta1.GroupName + "/" + version}
		},
		Slices: restSlices{c.ImportSlices},
	}
}

// restEvents is [EventsAPI] over the core REST client: client-go's event
// recorder would need the clientset.
type restEvents struct{ c *rest.RESTClient }

func (e restEvents) Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.c.Post().Namespace(ev.Namespace).Resource("events").
		VersionedParams(&metav1.CreateOptions{FieldManager: kubeclient.FieldManager}, metav1.ParameterCodec).
		Body(ev).Do(ctx).Into(out)
	return out, err
}

// restExports is [ExportsAPI] over a REST client.
type restExports struct{ c *rest.RESTClient }

func (e restExports) UpdateStatus(ctx context.Context, se *mcsv1beta1.ServiceExport) (*mcsv1beta1.ServiceExport, error) {
	out := &mcsv1beta1.ServiceExport{}
	err := e.c.Put().
		Namespace(se.Namespace).Resource(mcsv1beta1.ServiceExportPluralName).Name(se.Name).SubResource("status").
		VersionedParams(&metav1.UpdateOptions{FieldManager: kubeclient.FieldManager}, metav1.ParameterCodec).
		Body(se).Do(ctx).Into(out)
	return out, err
}

// restImports is [importwriter.ImportsAPI] over a REST client.
type restImports struct {
	c          *rest.RESTClient
	apiVersion string
}

func (i restImports) APIVersion() string { return i.apiVersion }

func (i restImports) ListerWatcher(labelSelector string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(i.c, mcsv1beta1.ServiceImportPluralName, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = labelSelector
	})
}

func (i restImports) Create(ctx context.Context, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	out := &mcsv1beta1.ServiceImport{}
	err := i.c.Post().Namespace(si.Namespace).Resource(mcsv1beta1.ServiceImportPluralName).
		VersionedParams(&metav1.CreateOptions{FieldManager: kubeclient.FieldManager}, metav1.ParameterCodec).
		Body(si).Do(ctx).Into(out)
	return out, err
}

func (i restImports) Update(ctx context.Context, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	return i.put(ctx, si, "")
}

func (i restImports) UpdateStatus(ctx context.Context, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	return i.put(ctx, si, "status")
}

func (i restImports) put(ctx context.Context, si *mcsv1beta1.ServiceImport, subresource string) (*mcsv1beta1.ServiceImport, error) {
	out := &mcsv1beta1.ServiceImport{}
	req := i.c.Put().Namespace(si.Namespace).Resource(mcsv1beta1.ServiceImportPluralName).Name(si.Name)
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	err := req.VersionedParams(&metav1.UpdateOptions{FieldManager: kubeclient.FieldManager}, metav1.ParameterCodec).
		Body(si).Do(ctx).Into(out)
	return out, err
}

func (i restImports) Delete(ctx context.Context, namespace, name string, pre metav1.Preconditions) error {
	return i.c.Delete().Namespace(namespace).Resource(mcsv1beta1.ServiceImportPluralName).Name(name).
		Body(&metav1.DeleteOptions{Preconditions: &pre}).Do(ctx).Error()
}

// restSlices is [importwriter.SlicesAPI] over a REST client.
type restSlices struct{ c *rest.RESTClient }

func (s restSlices) ListerWatcher(labelSelector string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(s.c, "endpointslices", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = labelSelector
	})
}

func (s restSlices) Create(ctx context.Context, es *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
	out := &discoveryv1.EndpointSlice{}
	err := s.c.Post().Namespace(es.Namespace).Resource("endpointslices").
		VersionedParams(&metav1.CreateOptions{FieldManager: kubeclient.FieldManager}, metav1.ParameterCodec).
		Body(es).Do(ctx).Into(out)
	return out, err
}

func (s restSlices) Update(ctx context.Context, es *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
	out := &discoveryv1.EndpointSlice{}
	err := s.c.Put().Namespace(es.Namespace).Resource("endpointslices").Name(es.Name).
		VersionedParams(&metav1.UpdateOptions{FieldManager: kubeclient.FieldManager}, metav1.ParameterCodec).
		Body(es).Do(ctx).Into(out)
	return out, err
}

func (s restSlices) Delete(ctx context.Context, namespace, name string, pre metav1.Preconditions) error {
	return s.c.Delete().Namespace(namespace).Resource("endpointslices").Name(name).
		Body(&metav1.DeleteOptions{Preconditions: &pre}).Do(ctx).Error()
}
