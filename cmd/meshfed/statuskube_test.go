package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshfed/meshfed/internal/kubetest"
)

// TestStatusThroughKube drives meshfed status --kubeconfig against a real
// API server: which hub pod it picks, and what it says when there is none
// to pick or it may not look. The test API server has no kubelet, so no
// port-forward can complete here: the last step, through the API server
// to a kubelet, fails, and the test checks that the failure names the
// pod and port it chose. What status asks through a forward is what it
// asks a direct address (a hubConn either way), tested in
// statuswait_test.go against a hub's own listener.
func TestStatusThroughKube(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	pods := c.Client.CoreV1().Pods("meshfed")
	if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshfed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeStatus := func(t *testing.T, kubeconfig string, args ...string) (string, error) {
		t.Helper()
		var stderr bytes.Buffer
		err := statusWith(t.Context(), t, &bytes.Buffer{}, &stderr, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		return stderr.String(), err
	}
	wantErr := func(t *testing.T, err error, want ...string) {
		t.Helper()
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("status = %v, want an error saying %q", err, w)
			}
		}
	}

	t.Run("no hub pod", func(t *testing.T) {
		_, err := kubeStatus(t, c.Kubeconfig)
		wantErr(t, err, "no pod in namespace meshfed matches app.kubernetes.io/name=meshfed-hub: is the hub installed there?")
	})
	t.Run("--wait waits for one", func(t *testing.T) {
		_, err := kubeStatus(t, c.Kubeconfig, "--wait", "--timeout", "200ms")
		wantErr(t, err, "timed out after 200ms: no pod in namespace meshfed matches")
	})

	hubPod := func(name string) *corev1.Pod {
		t.Helper()
		p, err := pods.Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				"app.kubernetes.io/name": "meshfed-hub", "app.kubernetes.io/instance": "meshfed-hub",
			}},
			Spec: corev1.PodSpec{
				// A node that does not exist: the port-forward fails at the
				// API server, as it would at a kubelet that is gone.
				NodeName: "node-1",
				Containers: []corev1.Container{{
					Name: "hub", Image: "meshfed/meshfed-hub:0.1.0",
					Ports: []corev1.ContainerPort{{Name: "federation", ContainerPort: 9443}, {Name: "debug", ContainerPort: 9090}},
				}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// setStatus plays the kubelet.
	setStatus := func(p *corev1.Pod, ready bool) {
		t.Helper()
		p.Status.Phase = corev1.PodRunning
		cond := corev1.ConditionFalse
		if ready {
			cond = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()}}
		if _, err := pods.UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	a := hubPod("meshfed-hub-a")
	t.Run("no pod runs", func(t *testing.T) {
		_, err := kubeStatus(t, c.Kubeconfig)
		wantErr(t, err, "no hub pod in namespace meshfed runs: meshfed-hub-a (Pending)")
	})
	setStatus(a, false)
	t.Run("a pod runs but is not ready", func(t *testing.T) {
		stderr, err := kubeStatus(t, c.Kubeconfig)
		if want := "no hub pod in namespace meshfed is ready; asking meshfed-hub-a, which runs (a hub is not ready while it warms up)\n"; stderr != want {
			t.Errorf("status said %q, want %q", stderr, want)
		}
		wantErr(t, err, "port-forward to port 9090 of pod meshfed/meshfed-hub-a: ")
		t.Logf("without a kubelet: %v", err)
	})
	b := hubPod("meshfed-hub-b")
	setStatus(b, true)
	t.Run("a ready pod is preferred", func(t *testing.T) {
		stderr, err := kubeStatus(t, c.Kubeconfig)
		if stderr != "" {
			t.Errorf("status said %q", stderr)
		}
		wantErr(t, err, "port-forward to port 9090 of pod meshfed/meshfed-hub-b: ")
	})
	t.Run("another release's selector", func(t *testing.T) {
		_, err := kubeStatus(t, c.Kubeconfig, "--hub-selector", "app.kubernetes.io/instance=other")
		wantErr(t, err, "no pod in namespace meshfed matches app.kubernetes.io/instance=other")
	})

	alice := impersonating(t, c.Kubeconfig, "alice")
	t.Run("forbidden to list pods", func(t *testing.T) {
		start := time.Now()
		_, err := kubeStatus(t, alice, "--wait", "--timeout", "1m")
		wantErr(t, err, `pods is forbidden: User "alice" cannot list resource "pods"`,
			"meshfed status needs list on pods and create on pods/portforward there")
		if waited := time.Since(start); waited > 30*time.Second {
			t.Errorf("--wait waited %v on an error waiting does not cure", waited)
		}
	})
	t.Run("forbidden to port-forward", func(t *testing.T) {
		grant(t, c, "alice", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}})
		// RBAC takes effect once the authorizer's informers have it.
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var err error
		for {
			if _, err = kubeStatus(t, alice); err != nil && !strings.Contains(err.Error(), "cannot list resource") {
				break
			}
			select {
			case <-deadline.C:
				t.Fatalf("the list grant never took effect: %v", err)
			case <-tick.C:
			}
		}
		wantErr(t, err, `cannot create resource "pods/portforward"`, "meshfed status needs create on pods/portforward in namespace meshfed")
	})
	t.Run("a kubeconfig that is not there", func(t *testing.T) {
		_, err := kubeStatus(t, filepath.Join(t.TempDir(), "nope"))
		wantErr(t, err, "kubeconfig: ")
	})
}

// impersonating writes a kubeconfig that acts as user, through the
// administrator's credentials of kubeconfig.
func impersonating(t *testing.T, kubeconfig, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+user)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// grant gives user rule in namespace meshfed.
func grant(t *testing.T, c *kubetest.Cluster, user string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rbac := c.Client.RbacV1()
	if _, err := rbac.Roles("meshfed").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings("meshfed").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
