package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// API is what a source reads and writes of a cluster's Kubernetes API.
//
// [NewAPI] builds it over REST clients whose scheme holds only the kinds
// the spoke reads. client-go's clientset and discovery client (and
// mcs-api's, built on them) register all 56 built-in API groups: linking
// them doubled the binary's Kubernetes code and cost every meshfed process
// about 25 MB of resident memory before it did anything. Tests build an
// API over fake clientsets.
type API struct {
	// Services, EndpointSlices, Nodes and Namespaces list and watch all of
	// their kind; Pods those not finished (a Job's finished pods can
	// outnumber the live ones, and they have no workload).
	Services, EndpointSlices, Pods, Nodes, Namespaces cache.ListerWatcher
	// Exports is nil for a source that watches no ServiceExports.
	Exports ExportsAPI
	// Events is nil for a source that records no Events.
	Events EventsAPI
}

// EventsAPI records Kubernetes Events (core v1).
type EventsAPI interface {
	Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
}

// ExportsAPI reads and writes MCS ServiceExports (v1alpha1).
type ExportsAPI interface {
	// Served tells whether the API server serves ServiceExports; an error
	// means it cannot tell yet.
	Served(ctx context.Context) (bool, error)
	ListerWatcher() cache.ListerWatcher
	// UpdateStatus writes se's status and returns the stored object.
	UpdateStatus(ctx context.Context, se *mcsv1alpha1.ServiceExport) (*mcsv1alpha1.ServiceExport, error)
}

// unfinishedPods is the field selector of [API.Pods].
const unfinishedPods = "status.phase!=Succeeded,status.phase!=Failed"

// NewAPI returns the API of the server rc points to: protobuf for the
// built-in kinds (smaller and faster to decode at the initial list), JSON
// for ServiceExports (custom resources speak only JSON). The clients share
// one HTTP client and one rate limiter; rc is not modified.
func NewAPI(rc *rest.Config) (API, error) {
	rc = rest.CopyConfig(rc)
	if rc.RateLimiter == nil && rc.QPS > 0 {
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return API{}, fmt.Errorf("kubernetes client: %w", err)
	}
	client := func(gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error, contentType string) (*rest.RESTClient, error) {
		scheme := runtime.NewScheme()
		if err := addToScheme(scheme); err != nil {
			return nil, err
		}
		c := rest.CopyConfig(rc)
		c.GroupVersion = &gv
		c.APIPath = "/apis"
		if gv.Group == "" {
			c.APIPath = "/api"
		}
		c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
		c.ContentType = contentType
		c.AcceptContentTypes = contentType
		if contentType == runtime.ContentTypeProtobuf {
			c.AcceptContentTypes += "," + runtime.ContentTypeJSON
		}
		restClient, err := rest.RESTClientForConfigAndClient(c, httpClient)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for %s: %w", gv, err)
		}
		return restClient, nil
	}
	core, err := client(corev1.SchemeGroupVersion, corev1.AddToScheme, runtime.ContentTypeProtobuf)
	if err != nil {
		return API{}, err
	}
	disc, err := client(discoveryv1.SchemeGroupVersion, discoveryv1.AddToScheme, runtime.ContentTypeProtobuf)
	if err != nil {
		return API{}, err
	}
	mcs, err := client(mcsv1alpha1.SchemeGroupVersion, mcsv1alpha1.Install, runtime.ContentTypeJSON)
	if err != nil {
		return API{}, err
	}
	all := fields.Everything()
	return API{
		Services:       cache.NewListWatchFromClient(core, "services", metav1.NamespaceAll, all),
		EndpointSlices: cache.NewListWatchFromClient(disc, "endpointslices", metav1.NamespaceAll, all),
		Pods: cache.NewFilteredListWatchFromClient(core, "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.FieldSelector = unfinishedPods
		}),
		Nodes:      cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll, all),
		Namespaces: cache.NewListWatchFromClient(core, "namespaces", metav1.NamespaceAll, all),
		Exports:    restExports{mcs},
		Events:     restEvents{core},
	}, nil
}

// restEvents is [EventsAPI] over the core REST client: client-go's event
// recorder would need the clientset.
type restEvents struct{ c *rest.RESTClient }

func (e restEvents) Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.c.Post().Namespace(ev.Namespace).Resource("events").
		VersionedParams(&metav1.CreateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
		Body(ev).Do(ctx).Into(out)
	return out, err
}

// restExports is [ExportsAPI] over a REST client.
type restExports struct{ c *rest.RESTClient }

func (e restExports) Served(ctx context.Context) (bool, error) {
	gv := mcsv1alpha1.SchemeGroupVersion
	raw, err := e.c.Get().AbsPath("/apis", gv.Group, gv.Version).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var resources metav1.APIResourceList
	if err := json.Unmarshal(raw, &resources); err != nil {
		return false, fmt.Errorf("discovery of %s: %w", gv, err)
	}
	return listsExports(&resources), nil
}

// listsExports reports whether a group version's resources include
// ServiceExports.
func listsExports(resources *metav1.APIResourceList) bool {
	return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool {
		return r.Name == mcsv1alpha1.ServiceExportPluralName
	})
}

func (e restExports) ListerWatcher() cache.ListerWatcher {
	return cache.NewListWatchFromClient(e.c, mcsv1alpha1.ServiceExportPluralName, metav1.NamespaceAll, fields.Everything())
}

func (e restExports) UpdateStatus(ctx context.Context, se *mcsv1alpha1.ServiceExport) (*mcsv1alpha1.ServiceExport, error) {
	out := &mcsv1alpha1.ServiceExport{}
	err := e.c.Put().
		Namespace(se.Namespace).Resource(mcsv1alpha1.ServiceExportPluralName).Name(se.Name).SubResource("status").
		VersionedParams(&metav1.UpdateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
		Body(se).Do(ctx).Into(out)
	return out, err
}
