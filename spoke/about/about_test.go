package about_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/spoke/about"
	"github.com/meshfed/meshfed/spoke/kubeclient"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// CreateProperty creates a ClusterProperty through version v.
func createProperty(t *testing.T, c *kubetest.Cluster, v, name, value string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: about.Group, Version: v, Kind: "ClusterProperty"})
	u.SetName(name)
	if err := unstructured.SetNestedField(u.Object, value, "spec", "value"); err != nil {
		t.Fatal(err)
	}
	if err := c.CRClient.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, c *kubetest.Cluster) about.Properties {
	t.Helper()
	clients, err := kubeclient.New(c.Config, kubeclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := about.Read(t.Context(), clients.Core)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRead reads the well-known properties from real API servers: one
// without the About API, one serving v1beta1 (and v1alpha1), one serving
// only v1alpha1.
func TestRead(t *testing.T) {
	cs := kubetest.Start(t, 2)
	beta, alpha := cs[0], cs[1]
	if p := read(t, beta); p != (about.Properties{}) {
		t.Errorf("without the About API: %+v, want nothing", p)
	}
	beta.InstallAboutAPI(t)
	if p := read(t, beta); p != (about.Properties{}) {
		t.Errorf("without properties: %+v, want nothing", p)
	}
	createProperty(t, beta, "v1beta1", about.ClusterIDProperty, "east")
	createProperty(t, beta, "v1beta1", about.ClustersetProperty, "prod")
	if p := read(t, beta); p != (about.Properties{ClusterID: "east", Clusterset: "prod"}) {
		t.Errorf("v1beta1: %+v", p)
	}
	// One who may not read them is told why.
	rc := rest.CopyConfig(beta.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	clients, err := kubeclient.New(rc, kubeclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := about.Read(t.Context(), clients.Core); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), `User "nobody" cannot get resource "clusterproperties" in API group "about.k8s.io"`) {
		t.Errorf("read without permission: %v, want forbidden, saying why", err)
	}
	alpha.InstallAboutAPI(t, "v1alpha1")
	createProperty(t, alpha, "v1alpha1", about.ClusterIDProperty, "west")
	if p := read(t, alpha); p != (about.Properties{ClusterID: "west"}) {
		t.Errorf("v1alpha1 only: %+v", p)
	}
}

func TestResolveClusterID(t *testing.T) {
	for _, tc := range []struct {
		flag, property, want, err string
	}{
		{flag: "east", want: "east"},
		{property: "east", want: "east"},
		{flag: "east", property: "east", want: "east"},
		{flag: "west", property: "east", err: `ClusterProperty cluster.clusterset.k8s.io says "east" and --cluster-id says "west"`},
		{err: "no cluster ID: give --cluster-id, or create ClusterProperty cluster.clusterset.k8s.io"},
	} {
		got, err := about.ResolveClusterID(tc.flag, about.Properties{ClusterID: tc.property})
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("flag %q, property %q: %q, %v; want %q, %q", tc.flag, tc.property, got, err, tc.want, tc.err)
		}
	}
}
