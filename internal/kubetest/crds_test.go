package kubetest

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
)

// TestCRDsMatchModule keeps crds/ identical to the CRDs of the mcs-api
// version in go.mod: after bumping it, copy its config/crd/*.yaml here.
func TestCRDsMatchModule(t *testing.T) {
	for file, want := range map[string][]byte{
		"crds/multicluster.x-k8s.io_serviceexports.yaml": mcscrd.ServiceExportCRD,
		"crds/multicluster.x-k8s.io_serviceimports.yaml": mcscrd.ServiceImportCRD,
	} {
		got, err := crdFiles.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from sigs.k8s.io/mcs-api's config/crd (-want +got):\n%s", file, cmp.Diff(string(want), string(got)))
		}
	}
}

func TestCRDs(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	type version struct {
		Name            string
		Served, Storage bool
	}
	got := map[string][]version{}
	for _, crd := range crds {
		if crd.Spec.Group != "multicluster.x-k8s.io" {
			t.Errorf("%s: group %q", crd.Name, crd.Spec.Group)
		}
		for _, v := range crd.Spec.Versions {
			got[crd.Spec.Names.Kind] = append(got[crd.Spec.Names.Kind], version{v.Name, v.Served, v.Storage})
		}
	}
	want := map[string][]version{
		"ServiceExport": {{"v1alpha1", true, false}, {"v1beta1", true, true}},
		"ServiceImport": {{"v1alpha1", true, false}, {"v1beta1", true, true}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CRD versions (-want +got):\n%s", diff)
	}
}
