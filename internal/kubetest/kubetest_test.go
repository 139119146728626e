package kubetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// TestStartTwoClusters creates a Service and ServiceExports of both served
// versions in each of two clusters and reads them back through every client.
func TestStartTwoClusters(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	clusters := Start(t, 2)
	t.Logf("started %d API servers in %v", len(clusters), time.Since(begin).Round(time.Millisecond))
	ctx := t.Context()

	for _, c := range clusters {
		mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}})
		for _, name := range []string{"echo", "db"} {
			mustCreate(t, c, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}},
			})
		}
		// echo is exported as v1alpha1, db as v1beta1; both list in both.
		if _, err := c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Create(ctx,
			&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		mustCreate(t, c, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "db"}})

		want := []string{"db", "echo"}
		svcs, err := c.Client.CoreV1().Services("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		exportsV1alpha1, err := c.MCS.MulticlusterV1alpha1().ServiceExports("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		exportsV1beta1 := &mcsv1beta1.ServiceExportList{}
		if err := c.CRClient.List(ctx, exportsV1beta1, client.InNamespace("demo")); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for kind, got := range map[string][]string{
			"Services":                names(svcs.Items, func(s corev1.Service) string { return s.Name }),
			"v1alpha1 ServiceExports": names(exportsV1alpha1.Items, func(e mcsv1alpha1.ServiceExport) string { return e.Name }),
			"v1beta1 ServiceExports":  names(exportsV1beta1.Items, func(e mcsv1beta1.ServiceExport) string { return e.Name }),
		} {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s", c.Name, kind, diff)
			}
		}
	}

	// The clusters share nothing.
	mustCreate(t, clusters[0], &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "only-in-0"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	})
	if _, err := clusters[1].Client.CoreV1().Services("demo").Get(ctx, "only-in-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster-1 get only-in-0: got %v, want NotFound", err)
	}

	// The kubeconfig file is enough to reach the cluster.
	cfg, err := clientcmd.BuildConfigFromFlags("", clusters[1].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{}); err != nil {
		t.Errorf("through %s: %v", clusters[1].Kubeconfig, err)
	}
}

// TestRestart restarts an API server under a client and a watch: the watch
// ends, and afterwards the same client finds the same objects at the same
// address.
func TestRestart(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	c := Start(t, 1)[0]
	t.Logf("started 1 API server in %v", time.Since(begin).Round(time.Millisecond))
	ctx := t.Context()
	configMaps := c.Client.CoreV1().ConfigMaps("default")

	before, err := configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := configMaps.Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	host := c.Config.Host

	begin = time.Now()
	c.StopAPIServer(t)
	select {
	case _, open := <-w.ResultChan():
		if open {
			t.Error("got a watch event, want the watch to end")
		}
	case <-time.After(30 * time.Second):
		t.Error("the watch did not end when the API server stopped")
	}
	if _, err := configMaps.Get(ctx, "before", metav1.GetOptions{}); err == nil {
		t.Error("get while the API server is stopped: got no error")
	}
	c.StartAPIServer(t)
	t.Logf("restarted the API server in %v", time.Since(begin).Round(time.Millisecond))

	if c.Config.Host != host {
		t.Errorf("host after restart: got %s, want %s", c.Config.Host, host)
	}
	got, err := configMaps.Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if got.UID != before.UID || got.ResourceVersion != before.ResourceVersion {
		t.Errorf("after restart: got uid %s rv %s, want uid %s rv %s", got.UID, got.ResourceVersion, before.UID, before.ResourceVersion)
	}
	// The CRDs are still served.
	mustCreate(t, c, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "after"}})
}

func TestAssetsDirMissing(t *testing.T) {
	for name, dir := range map[string]string{"unset": "", "empty": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(AssetsEnv, dir)
			_, err := AssetsDir()
			if err == nil || !strings.Contains(err.Error(), "make test-assets") {
				t.Errorf("got %v, want an error that says to run make test-assets", err)
			}
		})
	}
}

func mustCreate(t *testing.T, c *Cluster, obj client.Object) {
	t.Helper()
	if err := c.CRClient.Create(t.Context(), obj); err != nil {
		t.Fatalf("%s: create %T %s/%s: %v", c.Name, obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

func names[T any](items []T, name func(T) string) []string {
	out := make([]string, 0, len(items))
	for _, item := range items {
		out = append(out, name(item))
	}
	slices.Sort(out)
	return out
}
