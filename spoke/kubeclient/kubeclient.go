// Package kubeclient builds the REST clients of the kinds a spoke reads
// and writes in its cluster, over one HTTP client and one rate limiter
// (the imports' writes may have their own).
//
// Their schemes hold only these kinds. client-go's clientset and
// discovery client (and mcs-api's, built on them) register all 56
// built-in API groups: linking them doubled the binary's Kubernetes code
// and cost every meshfed process tens of megabytes of resident memory
// before it did anything (spoke/leader's package doc measures what
// linking a part of it costs).
package kubeclient

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// FieldManager names the spoke in the managedFields of what it writes.
const FieldManager = "meshfed-spoke"

// MCSVersions are the MCS versions the spoke speaks, preferred first.
var MCSVersions = []schema.GroupVersion{mcsv1beta1.SchemeGroupVersion, mcsv1alpha1.SchemeGroupVersion}

// Options tune [New].
type Options struct {
	// ImportQPS and ImportBurst bound the writes of imports
	// (ServiceImports and their EndpointSlices) with a rate limiter of
	// their own (0: DefaultImportQPS, and twice the QPS); the cluster's
	// reads, the ServiceExport status and the Events keep the config's.
	ImportQPS   float32
	ImportBurst int
	// Log, when set, gets the API server's warnings on import writes,
	// each once (the default handler prints them through klog at every
	// request: every write of a gateway's FQDN slice warns that the
	// address type is deprecated).
	Log *slog.Logger
}

// Clients are the REST clients of one API server.
type Clients struct {
	// Core (Services, Pods, Nodes, Namespaces, Events) and Discovery
	// (EndpointSlices) speak protobuf: smaller and faster to decode at
	// the initial list.
	Core, Discovery *rest.RESTClient
	// ImportSlices writes the MCS EndpointSlices of imports.
	ImportSlices *rest.RESTClient
	// Exports and Imports are the MCS clients by version (JSON: custom
	// resources speak nothing else); the Imports' write imports.
	Exports, Imports map[string]*rest.RESTClient
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

// Client defaults for a spoke. client-go's (5 QPS, burst 10) would make the
// first status writes of a cluster with thousands of exports take minutes.
const (
	DefaultQPS   = 50
	DefaultBurst = 100
	userAgent    = "meshfed-spoke"
)

// DefaultImportQPS bounds the import writes (see BENCHMARKS.md).
const DefaultImportQPS = 500

// New returns the clients of the server rc points to, with the spoke's
// user agent and rate limits unless rc sets them. They share one HTTP
// client and one rate limiter (the import writes have their own with
// opts.ImportQPS); rc is not modified.
func New(rc *rest.Config, opts Options) (*Clients, error) {
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = userAgent
	}
	if rc.QPS == 0 {
		rc.QPS = DefaultQPS
	}
	if rc.Burst == 0 {
		rc.Burst = max(DefaultBurst, int(2*rc.QPS))
	}
	if rc.RateLimiter == nil && rc.QPS > 0 {
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if opts.ImportQPS == 0 {
		opts.ImportQPS = DefaultImportQPS
	}
	if opts.ImportBurst == 0 {
		opts.ImportBurst = int(2 * opts.ImportQPS)
	}
	importRC := rest.CopyConfig(rc)
	importRC.QPS, importRC.Burst = opts.ImportQPS, max(opts.ImportBurst, 1)
	importRC.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(importRC.QPS, importRC.Burst)
	if opts.Log != nil {
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
	out := &Clients{Exports: map[string]*rest.RESTClient{}, Imports: map[string]*rest.RESTClient{}}
	if out.Core, err = client(rc, corev1.SchemeGroupVersion, corev1.AddToScheme, runtime.ContentTypeProtobuf); err != nil {
		return nil, err
	}
	if out.Discovery, err = client(rc, discoveryv1.SchemeGroupVersion, discoveryv1.AddToScheme, runtime.ContentTypeProtobuf); err != nil {
		return nil, err
	}
	if out.ImportSlices, err = client(importRC, discoveryv1.SchemeGroupVersion, discoveryv1.AddToScheme, runtime.ContentTypeProtobuf); err != nil {
		return nil, err
	}
	for _, gv := range MCSVersions {
		if out.Exports[gv.Version], err = client(rc, gv, mcsScheme(gv), runtime.ContentTypeJSON); err != nil {
			return nil, err
		}
		if out.Imports[gv.Version], err = client(importRC, gv, mcsScheme(gv), runtime.ContentTypeJSON); err != nil {
			return nil, err
		}
	}
	return out, nil
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
