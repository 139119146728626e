package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"

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
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/source/kube/importwriter"
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
	// Services, Nodes and Namespaces list and watch all of their kind;
	// EndpointSlices those of a Service (labelled kubernetes.io/service-name:
	// no other slice is read, meshfed's MCS slices included); Pods those
	// not finished (a Job's finished pods can outnumber the live ones, and
	// they have no workload).
	Services, EndpointSlices, Pods, Nodes, Namespaces cache.ListerWatcher
	// MCS is nil for a source that reads and writes no MCS kinds.
	MCS MCSAPI
	// Events is nil for a source that records no Events.
	Events EventsAPI
	// Slices writes the MCS EndpointSlices of imports; nil for a source
	// that writes no imports.
	Slices importwriter.SlicesAPI
}

// EventsAPI records Kubernetes Events (core v1).
type EventsAPI interface {
	Create(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
}

// MCSAPI reads and writes the MCS kinds (multicluster.x-k8s.io) at the
// versions the API server serves. Objects are mcs-api's v1beta1 Go types
// whatever the version: v1alpha1's have the same fields.
type MCSAPI interface {
	// Served returns the version the API server serves of each kind
	// (v1beta1 where it serves it); an error means it cannot tell yet.
	Served(ctx context.Context) (MCSVersions, error)
	Exports(version string) ExportsAPI
	Imports(version string) importwriter.ImportsAPI
}

// MCSVersions are the versions of the MCS kinds a cluster serves, ""
// for a kind it does not serve.
type MCSVersions struct{ Exports, Imports string }

// ExportsAPI reads and writes MCS ServiceExports at one version.
type ExportsAPI interface {
	// ListerWatcher's objects are *mcsv1beta1.ServiceExport.
	ListerWatcher() cache.ListerWatcher
	// UpdateStatus writes se's status and returns the stored object.
	UpdateStatus(ctx context.Context, se *mcsv1beta1.ServiceExport) (*mcsv1beta1.ServiceExport, error)
}

// unfinishedPods is the field selector of [API.Pods].
const unfinishedPods = "status.phase!=Succeeded,status.phase!=Failed"

// mcsVersions are the MCS versions the spoke speaks, preferred first.
var mcsVersions = []schema.GroupVersion{mcsv1beta1.SchemeGroupVersion, mcsv1alpha1.SchemeGroupVersion}

// APIOptions tune [NewAPI].
type APIOptions struct {
	// ImportQPS and ImportBurst, when ImportQPS is set, bound the writes of
	// imports (ServiceImports and their EndpointSlices) with a rate
	// limiter of their own; otherwise they share the config's.
	ImportQPS   float32
	ImportBurst int
	// Log, when set, gets the API server's warnings on import writes,
	// each once (the default handler prints them through klog at every
	// request: every write of a gateway's FQDN slice warns that the
	// address type is deprecated).
	Log *slog.Logger
}

// onceWarnings logs each distinct warning of the API server once.
type onceWarnings struct {
	log  *slog.Logger
	seen sync.Map
}

func (w *onceWarnings) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	if _, dup := w.seen.LoadOrStore(text, true); !dup {
		w.log.Info("the API server warns (logged once)", "warning", text, "agent", agent)
	}
}

// NewAPI returns the API of the server rc points to: protobuf for the
// built-in kinds (smaller and faster to decode at the initial list), JSON
// for the MCS kinds (custom resources speak only JSON). The clients share
// one HTTP client and one rate limiter (the import writes have their own
// with opts.ImportQPS); rc is not modified.
func NewAPI(rc *rest.Config, opts APIOptions) (API, error) {
	rc = rest.CopyConfig(rc)
	if rc.RateLimiter == nil && rc.QPS > 0 {
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return API{}, fmt.Errorf("kubernetes client: %w", err)
	}
	importRC := rc
	if opts.ImportQPS > 0 {
		importRC = rest.CopyConfig(rc)
		importRC.QPS, importRC.Burst = opts.ImportQPS, max(opts.ImportBurst, 1)
		importRC.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(importRC.QPS, importRC.Burst)
	}
	if opts.Log != nil {
		if importRC == rc {
			importRC = rest.CopyConfig(rc)
		}
		importRC.WarningHandlerWithContext = &onceWarnings{log: opts.Log}
	}
	client := func(rc *rest.Config, gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error, contentType string) (*rest.RESTClient, error) {
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
	core, err := client(rc, corev1.SchemeGroupVersion, corev1.AddToScheme, runtime.ContentTypeProtobuf)
	if err != nil {
		return API{}, err
	}
	disc, err := client(rc, discoveryv1.SchemeGroupVersion, discoveryv1.AddToScheme, runtime.ContentTypeProtobuf)
	if err != nil {
		return API{}, err
	}
	importSlices, err := client(importRC, discoveryv1.SchemeGroupVersion, discoveryv1.AddToScheme, runtime.ContentTypeProtobuf)
	if err != nil {
		return API{}, err
	}
	mcs := restMCS{exports: map[string]*rest.RESTClient{}, imports: map[string]*rest.RESTClient{}}
	for _, gv := range mcsVersions {
		if mcs.exports[gv.Version], err = client(rc, gv, mcsScheme(gv), runtime.ContentTypeJSON); err != nil {
			return API{}, err
		}
		if mcs.imports[gv.Version], err = client(importRC, gv, mcsScheme(gv), runtime.ContentTypeJSON); err != nil {
			return API{}, err
		}
	}
	all := fields.Everything()
	return API{
		Services: cache.NewListWatchFromClient(core, "services", metav1.NamespaceAll, all),
		EndpointSlices: cache.NewFilteredListWatchFromClient(disc, "endpointslices", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName
		}),
		Pods: cache.NewFilteredListWatchFromClient(core, "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.FieldSelector = unfinishedPods
		}),
		Nodes:      cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll, all),
		Namespaces: cache.NewListWatchFromClient(core, "namespaces", metav1.NamespaceAll, all),
		MCS:        mcs,
		Events:     restEvents{core},
		Slices:     restSlices{importSlices},
	}, nil
}

// mcsScheme registers the v1beta1 Go types of the MCS kinds under gv: a
// v1alpha1 client decodes into them and encodes them as v1alpha1.
func mcsScheme(gv schema.GroupVersion) func(*runtime.Scheme) error {
	return func(s *runtime.Scheme) error {
		for kind, obj := range map[string]runtime.Object{
			mcsv1beta1.ServiceExportKindName:          &mcsv1beta1.ServiceExport{},
			mcsv1beta1.ServiceExportKindName + "List": &mcsv1beta1.ServiceExportList{},
			mcsv1beta1.ServiceImportKindName:          &mcsv1beta1.ServiceImport{},
			mcsv1beta1.ServiceImportKindName + "List": &mcsv1beta1.ServiceImportList{},
		} {
			s.AddKnownTypeWithName(gv.WithKind(kind), obj)
		}
		metav1.AddToGroupVersion(s, gv)
		return nil
	}
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

// restMCS is [MCSAPI] over a REST client per version and kind (the
// imports' may have their own rate limiter).
type restMCS struct{ exports, imports map[string]*rest.RESTClient }

// Served asks each version's discovery document. A version the server
// does not serve answers 404.
func (m restMCS) Served(ctx context.Context) (MCSVersions, error) {
	var v MCSVersions
	for i := len(mcsVersions) - 1; i >= 0; i-- { // the preferred last, to win
		gv := mcsVersions[i]
		raw, err := m.exports[gv.Version].Get().AbsPath("/apis", gv.Group, gv.Version).Do(ctx).Raw()
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return MCSVersions{}, fmt.Errorf("discovery of %s: %w", gv, err)
		}
		var resources metav1.APIResourceList
		if err := json.Unmarshal(raw, &resources); err != nil {
			return MCSVersions{}, fmt.Errorf("discovery of %s: %w", gv, err)
		}
		if lists(&resources, mcsv1beta1.ServiceExportPluralName) {
			v.Exports = gv.Version
		}
		if lists(&resources, mcsv1beta1.ServiceImportPluralName) {
			v.Imports = gv.Version
		}
	}
	return v, nil
}

// lists reports whether a group version's resources include a resource.
func lists(resources *metav1.APIResourceList, name string) bool {
	return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == name })
}

func (m restMCS) Exports(version string) ExportsAPI { return restExports{m.exports[version]} }

func (m restMCS) Imports(version string) importwriter.ImportsAPI {
	return restImports{m.imports[version], mcsv1beta1.GroupName + "/" + version}
}

// restExports is [ExportsAPI] over a REST client.
type restExports struct{ c *rest.RESTClient }

func (e restExports) ListerWatcher() cache.ListerWatcher {
	return cache.NewListWatchFromClient(e.c, mcsv1beta1.ServiceExportPluralName, metav1.NamespaceAll, fields.Everything())
}

func (e restExports) UpdateStatus(ctx context.Context, se *mcsv1beta1.ServiceExport) (*mcsv1beta1.ServiceExport, error) {
	out := &mcsv1beta1.ServiceExport{}
	err := e.c.Put().
		Namespace(se.Namespace).Resource(mcsv1beta1.ServiceExportPluralName).Name(se.Name).SubResource("status").
		VersionedParams(&metav1.UpdateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
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
		VersionedParams(&metav1.CreateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
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
	err := req.VersionedParams(&metav1.UpdateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
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
		VersionedParams(&metav1.CreateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
		Body(es).Do(ctx).Into(out)
	return out, err
}

func (s restSlices) Update(ctx context.Context, es *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
	out := &discoveryv1.EndpointSlice{}
	err := s.c.Put().Namespace(es.Namespace).Resource("endpointslices").Name(es.Name).
		VersionedParams(&metav1.UpdateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
		Body(es).Do(ctx).Into(out)
	return out, err
}

func (s restSlices) Delete(ctx context.Context, namespace, name string, pre metav1.Preconditions) error {
	return s.c.Delete().Namespace(namespace).Resource("endpointslices").Name(name).
		Body(&metav1.DeleteOptions{Preconditions: &pre}).Do(ctx).Error()
}
