package kubetest

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"
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

// TestGatewayCRDsMatchModule keeps gatewaycrds/ identical to the CRDs of
// the gateway-api version in go.mod: after bumping it, copy them from its
// config/crd/standard.
func TestGatewayCRDsMatchModule(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/gateway-api: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	names, err := fs.Glob(gatewayCRDFiles, "gatewaycrds/*.yaml")
	if err != nil || len(names) != 2 {
		t.Fatalf("gatewaycrds: %v %v", names, err)
	}
	for _, name := range names {
		got, err := gatewayCRDFiles.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, filepath.Base(name)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from sigs.k8s.io/gateway-api's config/crd/standard", name)
		}
	}
}

// TestIstioCRDsMatchModule keeps istiocrds/ equal to the
// AuthorizationPolicy CRD of the istio.io/istio version in go.mod: after
// bumping it, cut the CRD from manifests/charts/base/files/crd-all.gen.yaml
// again.
func TestIstioCRDsMatchModule(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
	if err != nil {
		t.Fatalf("go list -m istio.io/istio: %v", err)
	}
	all, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "manifests", "charts", "base", "files", "crd-all.gen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, doc := range strings.Split(string(all), "\n---\n") {
		if strings.Contains(doc, "name: authorizationpolicies.security.istio.io") {
			want = strings.TrimPrefix(strings.Trim(doc, "\n"), "---\n") + "\n"
		}
	}
	got, err := istioCRDFiles.ReadFile("istiocrds/security.istio.io_authorizationpolicies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want == "" || string(got) != want {
		t.Errorf("istiocrds/security.istio.io_authorizationpolicies.yaml differs from istio.io/istio's crd-all.gen.yaml (%d bytes there, %d here)", len(want), len(got))
	}
	// The DestinationRule CRD is abridged: its group, names, scope and
	// versions are the module's.
	for _, doc := range strings.Split(string(all), "\n---\n") {
		if !strings.Contains(doc, "name: destinationrules.networking.istio.io") {
			continue
		}
		full := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal([]byte(doc), full); err != nil {
			t.Fatal(err)
		}
		ours, err := DestinationRuleCRD()
		if err != nil {
			t.Fatal(err)
		}
		versions := func(c *apiextensionsv1.CustomResourceDefinition) []string {
			var out []string
			for _, v := range c.Spec.Versions {
				out = append(out, fmt.Sprintf("%s served=%v storage=%v", v.Name, v.Served, v.Storage))
			}
			return out
		}
		if o := ours[0]; o.Spec.Group != full.Spec.Group || o.Spec.Scope != full.Spec.Scope || !reflect.DeepEqual(o.Spec.Names, full.Spec.Names) ||
			!slices.Equal(versions(o), versions(full)) {
			t.Errorf("istiocrds/networking.istio.io_destinationrules.yaml: %v %v %v, want the module's %v %v %v",
				o.Spec.Group, o.Spec.Names, versions(o), full.Spec.Group, full.Spec.Names, versions(full))
		}
		return
	}
	t.Error("no DestinationRule CRD in istio.io/istio's crd-all.gen.yaml")
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
