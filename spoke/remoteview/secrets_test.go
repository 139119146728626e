package remoteview

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/kubeclient"
)

// members is a Server's Members that a test sets.
type members struct {
	mu      sync.Mutex
	ids     []federation.ClusterID
	changed chan struct{}
}

func (m *members) get() ([]federation.ClusterID, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids, m.changed
}

func (m *members) set(ids ...federation.ClusterID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids = append([]federation.ClusterID{}, ids...)
	close(m.changed)
	m.changed = make(chan struct{})
}

// runSecrets runs a writer until the returned stop.
func runSecrets(t *testing.T, w *Secrets) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// istioSystem starts an API server with istio-system, and returns it and
// the Secrets there as the spoke writes them: through its core REST client.
func istioSystem(t *testing.T) (*kubetest.Cluster, SecretsAPI) {
	t.Helper()
	c := kubetest.Start(t, 1)[0]
	if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clients, err := kubeclient.New(rest.CopyConfig(c.Config), kubeclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, RESTSecrets(clients.Core, "istio-system")
}

// TestSecrets: on a real API server, a remote secret per member, which
// istiod reads as a kubeconfig of the member's view; a member that goes
// loses its secret; Secrets that are not meshfed's are left alone.
func TestSecrets(t *testing.T) {
	_, api := istioSystem(t)
	ctx := t.Context()
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "istio-remote-secret-north", Labels: map[string]string{LabelMultiCluster: "true"}}}
	if _, err := api.Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &members{changed: make(chan struct{})}
	s := NewSecrets(api, SecretsConfig{URL: "https://spoke.meshfed.svc:15012", CA: []byte("-----BEGIN CERTIFICATE-----\n"), Token: "s3cret"}, m.get, slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop := runSecrets(t, s)
	names := func() ([]string, *corev1.SecretList) {
		list, err := api.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sec := range list.Items {
			out = append(out, sec.Name)
		}
		slices.Sort(out)
		return out, list
	}
	until := func(what string, want ...string) *corev1.SecretList {
		t.Helper()
		var list *corev1.SecretList
		testwait.ForState(t, what, func() (bool, string) {
			var got []string
			got, list = names()
			return slices.Equal(got, want), "secrets " + strings.Join(got, ", ")
		})
		return list
	}

	m.set("west")
	list := until("west's secret", "istio-remote-secret-north", "meshfed-remote-west")
	for _, sec := range list.Items {
		if sec.Name != "meshfed-remote-west" {
			continue
		}
		if sec.Labels[LabelMultiCluster] != "true" || sec.Annotations[AnnotationCluster] != "west" {
			t.Errorf("labels %v annotations %v", sec.Labels, sec.Annotations)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["west"])
		if err != nil {
			t.Fatalf("west's kubeconfig: %v", err)
		}
		if cfg.Host != "https://spoke.meshfed.svc:15012/clusters/west" || cfg.BearerToken != "s3cret" || string(cfg.CAData) != "-----BEGIN CERTIFICATE-----\n" {
			t.Errorf("west's kubeconfig: host %q token %q CA %q", cfg.Host, cfg.BearerToken, cfg.CAData)
		}
	}
	m.set("north", "west")
	until("north's and west's secrets", "istio-remote-secret-north", "meshfed-remote-north", "meshfed-remote-west")
	testwait.For(t, "the gauge of secrets", func() bool { return testutil.ToFloat64(s.metrics.secrets) == 2 })
	m.set()
	until("meshfed's secrets gone", "istio-remote-secret-north")
	stop()

	// With istioctl's prefix, Istio's own remote secret is taken over in
	// place (istiod swaps the cluster make-before-break).
	taker := NewSecrets(api, SecretsConfig{URL: "https://spoke.meshfed.svc:15012", CA: []byte("ca"), Token: "s3cret", Prefix: "istio-remote-secret-"}, m.get, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer runSecrets(t, taker)()
	m.set("north")
	testwait.ForState(t, "north's secret taken over", func() (bool, string) {
		sec, err := api.Get(ctx, "istio-remote-secret-north", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return sec.Labels[LabelRemoteView] == "north" && len(sec.Data["north"]) > 0, fmt.Sprint(sec.Labels)
	})
}

// TestSecretsOwned: with an owner, each remote secret is owned by its
// ConfigMap (deleting it has the garbage collector delete them); while the
// owner is missing, nothing is written.
func TestSecretsOwned(t *testing.T) {
	c, api := istioSystem(t)
	ctx := t.Context()
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	m := &members{changed: make(chan struct{})}
	s := NewSecrets(api,
		SecretsConfig{URL: "https://spoke:15012", CA: []byte("ca"), Token: "t", Owner: "meshfed-spoke-remote-secrets", RetryAfter: 50 * time.Millisecond}, m.get, log)
	defer runSecrets(t, s)()
	m.set("west")
	testwait.ForState(t, "the writer to find no owner", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "ConfigMap meshfed-spoke-remote-secrets"), logs.String()
	})
	if list, err := c.Client.CoreV1().Secrets("istio-system").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("secrets written without their owner: %v, %v", list, err)
	}
	cm, err := c.Client.CoreV1().ConfigMaps("istio-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "meshfed-spoke-remote-secrets"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testwait.ForState(t, "west's secret, owned", func() (bool, string) {
		sec, err := c.Client.CoreV1().Secrets("istio-system").Get(ctx, "meshfed-remote-west", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		refs := sec.OwnerReferences
		return len(refs) == 1 && refs[0].UID == cm.UID && refs[0].Kind == "ConfigMap", fmt.Sprint(refs)
	})
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
