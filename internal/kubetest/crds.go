package kubetest

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdFiles holds the CRDs of sigs.k8s.io/mcs-api's config/crd, copied
// byte for byte (TestCRDsMatchModule keeps them so).
//
//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs returns the MCS CustomResourceDefinitions (ServiceExport and
// ServiceImport, group multicluster.x-k8s.io, versions v1alpha1 and
// v1beta1), new objects on every call.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return readCRDs(crdFiles, "crds/*.yaml")
}

func readCRDs(files embed.FS, pattern string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, pattern)
	if err != nil {
		return nil, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// gatewayCRDFiles holds the Gateway API's standard GatewayClass and
// Gateway CRDs of sigs.k8s.io/gateway-api's config/crd/standard, copied
// byte for byte (TestGatewayCRDsMatchModule keeps them so).
//
//go:embed gatewaycrds/*.yaml
var gatewayCRDFiles embed.FS

// GatewayCRDs returns the Gateway API's GatewayClass and Gateway
// CustomResourceDefinitions (what Istio reads east-west gateways from),
// new objects on every call.
func GatewayCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return readCRDs(gatewayCRDFiles, "gatewaycrds/*.yaml")
}

// istioCRDFiles holds Istio's AuthorizationPolicy and DestinationRule CRDs, cut from
// istio.io/istio's manifests/charts/base/files/crd-all.gen.yaml
// (TestIstioCRDsMatchModule keeps it so).
//
//go:embed istiocrds/*.yaml
var istioCRDFiles embed.FS

// AuthorizationPolicyCRD returns Istio's AuthorizationPolicy
// CustomResourceDefinition (security.istio.io), a new object on every call.
func AuthorizationPolicyCRD() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return readCRDs(istioCRDFiles, "istiocrds/security.istio.io_authorizationpolicies.yaml")
}

// DestinationRuleCRD returns Istio's DestinationRule
// CustomResourceDefinition (networking.istio.io), a new object on every
// call.
func DestinationRuleCRD() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return readCRDs(istioCRDFiles, "istiocrds/networking.istio.io_destinationrules.yaml")
}

// aboutCRDFiles holds the About API's ClusterProperty CRD.
//
//go:embed aboutcrds/*.yaml
var aboutCRDFiles embed.FS

// ClusterPropertyCRD returns the About API's ClusterProperty
// CustomResourceDefinition (about.k8s.io, v1alpha1 and v1beta1), a new
// object on every call.
func ClusterPropertyCRD() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return readCRDs(aboutCRDFiles, "aboutcrds/*.yaml")
}
