package normalize

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Labels and annotations normalization reads. Most are Istio's, so clusters
// already set up for Istio multi-network need no relabelling.
const (
	// LabelExport on a Service exports it without an MCS ServiceExport when
	// its value is "true". Under [ExportAll], "false" opts a Service out.
	LabelExport = "meshfed.io/export"

	// LabelNetwork names the network of the system namespace (the cluster's
	// default), of a namespace's or a Pod's workloads, or the network an
	// east-west gateway Service serves.
	LabelNetwork = "topology.istio.io/network"

	// Locality labels on Nodes.
	LabelRegion  = "topology.kubernetes.io/region"
	LabelZone    = "topology.kubernetes.io/zone"
	LabelSubzone = "topology.istio.io/subzone"

	// LabelGatewayPort, as a label or an annotation on a gateway Service,
	// overrides the port of its mTLS (15443) gateway.
	LabelGatewayPort = "networking.istio.io/gatewayPort"

	// Workload labels, in order of preference.
	LabelAppName           = "app.kubernetes.io/name"
	LabelApp               = "app"
	LabelAppVersion        = "app.kubernetes.io/version"
	LabelVersion           = "version"
	LabelCanonicalName     = "service.istio.io/canonical-name"
	LabelCanonicalRevision = "service.istio.io/canonical-revision"

	// LabelSourceCluster marks an EndpointSlice an MCS implementation
	// imported from another cluster; such slices are never re-exported.
	LabelSourceCluster = "multicluster.kubernetes.io/source-cluster"
)

// East-west gateway ports (Istio's).
const (
	GatewayPortTLS   = 15443
	GatewayPortHBONE = 15008
)

// Reasons of the MCS ServiceExport Valid condition when it is false.
const (
	ReasonNoService          = string(mcsv1beta1.ServiceExportReasonNoService)
	ReasonInvalidServiceType = string(mcsv1beta1.ServiceExportReasonInvalidServiceType)
	// ReasonRejected: the Service, or one of its EndpointSlices, was
	// rejected (see [Rejection]). The kube source also gives it to the
	// Kubernetes Events it records on rejected objects.
	ReasonRejected = "MeshfedRejected"
)

// AnnotationAmbientRedirection marks a pod enrolled in Istio's ambient
// mode ("enabled"): its traffic is tunnelled over HBONE by ztunnel.
const AnnotationAmbientRedirection = "ambient.istio.io/redirection"

// LabelTLSMode is the label Istio's sidecar injector sets on the pods it
// injects ("istio"): they take Istio mutual TLS.
const LabelTLSMode = "security.istio.io/tlsMode"

// LabelPodTemplateHash is the label a Deployment's ReplicaSet gives its
// pods, the hash of their template (appsv1.DefaultDeploymentUniqueLabelKey:
// a constant of its own, so that the spoke does not link the apps API
// group for it).
const LabelPodTemplateHash = "pod-template-hash"

// Keys returns the label and annotation keys this package reads on objects
// of a kind; ServiceExports have none. The kube source drops every other
// label and annotation before it caches an object, so a function here that
// starts reading another key must add it to this list, or it will read
// nothing in a real cluster (the kube source's transform tests normalize
// objects before and after the drop and compare).
func Keys(k Kind) (labels, annotations []string) {
	switch k {
	case KindService:
		return []string{LabelExport, LabelNetwork, LabelGatewayPort}, []string{LabelGatewayPort}
	case KindPod:
		return []string{
			LabelNetwork,
			LabelAppName, LabelApp, LabelAppVersion, LabelVersion,
			LabelCanonicalName, LabelCanonicalRevision,
			LabelPodTemplateHash, // names a ReplicaSet's Deployment
			LabelTLSMode,
		}, []string{AnnotationAmbientRedirection}
	case KindNode:
		return []string{LabelRegion, LabelZone, LabelSubzone}, nil
	case KindNamespace:
		return []string{LabelNetwork}, nil
	case KindEndpointSlice:
		return []string{discoveryv1.LabelServiceName, LabelSourceCluster}, nil
	}
	return nil, nil
}
