package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshfed/meshfed/spoke/kubeclient"
)

// API is what a source reads of a cluster's Kubernetes API. [NewAPI]
// builds it over package kubeclient's REST clients; tests build one over
// fake clientsets.
type API struct {
	// Services, Nodes and Namespaces list and watch all of their kind;
	// EndpointSlices those of a Service (labelled kubernetes.io/service-name:
	// no other slice is read, meshfed's MCS slices included); Pods those
	// not finished (a Job's finished pods can outnumber the live ones, and
	// they have no workload).
	Services, EndpointSlices, Pods, Nodes, Namespaces cache.ListerWatcher
	// MCS is nil for a source that reads no MCS kinds.
	MCS MCSAPI
}

// MCSAPI reads the MCS kinds (multicluster.x-k8s.io) at the versions the
// API server serves. Objects are mcs-api's v1beta1 Go types whatever the
// version: v1alpha1's have the same fields.
type MCSAPI interface {
	// Served returns the version the API server serves of each kind
	// (v1beta1 where it serves it); an error means it cannot tell yet.
	Served(ctx context.Context) (MCSVersions, error)
	// Exports lists and watches ServiceExports at a served version; its
	// objects are *mcsv1beta1.ServiceExport.
	Exports(version string) cache.ListerWatcher
}

// MCSVersions are the versions of the MCS kinds a cluster serves, ""
// for a kind it does not serve.
type MCSVersions struct{ Exports, Imports string }

// unfinishedPods is the field selector of [API.Pods].
const unfinishedPods = "status.phase!=Succeeded,status.phase!=Failed"

// NewAPI returns the API of the server the clients talk to: protobuf for
// the built-in kinds, JSON for the MCS kinds.
func NewAPI(c *kubeclient.Clients) API {
	all := fields.Everything()
	return API{
		Services: cache.NewListWatchFromClient(c.Core, "services", metav1.NamespaceAll, all),
		EndpointSlices: cache.NewFilteredListWatchFromClient(c.Discovery, "endpointslices", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName
		}),
		Pods: cache.NewFilteredListWatchFromClient(c.Core, "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.FieldSelector = unfinishedPods
		}),
		Nodes:      cache.NewListWatchFromClient(c.Core, "nodes", metav1.NamespaceAll, all),
		Namespaces: cache.NewListWatchFromClient(c.Core, "namespaces", metav1.NamespaceAll, all),
		MCS:        restMCS{c.Exports},
	}
}

// restMCS is [MCSAPI] over a REST client per version.
type restMCS struct{ exports map[string]*rest.RESTClient }

// Served asks each version's discovery document. A version the server
// does not serve answers 404.
func (m restMCS) Served(ctx context.Context) (MCSVersions, error) {
	var v MCSVersions
	for i := len(kubeclient.MCSVersions) - 1; i >= 0; i-- { // the preferred last, to win
		gv := kubeclient.MCSVersions[i]
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

func (m restMCS) Exports(version string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(m.exports[version], mcsv1beta1.ServiceExportPluralName, metav1.NamespaceAll, fields.Everything())
}
