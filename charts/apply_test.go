package charts_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/spoke/kubeclient"
	"github.com/meshfed/meshfed/spoke/remoteview"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// fieldManager owns, in managedFields, what the test applies: the objects
// go in as `helm install --server-side` or a GitOps controller would send
// them, through server-side apply.
const fieldManager = "meshfed-chart-test"

// waitLimit bounds each wait for the spoke or the hub.
const waitLimit = 30 * time.Second

// TestChartsOnAPIServer installs the rendered charts on a real
// kube-apiserver, then runs the real spoke binary with the spoke chart's
// ServiceAccount token, so that the chart's ClusterRole is all it may do:
// what the golden files and TestCharts's invariants cannot show is whether
// the API server accepts the objects as rendered and whether the RBAC is
// enough (and no more than enough) for the spoke to work.
//
// There is no kubelet and no controller manager: Pods never run, and the
// test plays the EndpointSlice controller.
func TestChartsOnAPIServer(t *testing.T) {
	api := newAPIServer(t, kubetest.Start(t, 1)[0])
	api.installCRDs(t, filepath.Join("testdata", "apply-cert-manager-certificates.crd.yaml"))
	api.installCRDs(t, filepath.Join("testdata", "apply-prometheus-operator.crd.yaml"))
	// Before the renderings: the one that creates ClusterProperties also
	// installs their CRD, which must be served before they can be applied.
	api.installCRDs(t, filepath.Join("meshfed-spoke", "files", "about.k8s.io_clusterproperties.yaml"))
	h := newHelm(t)
	api.createNamespace(t, namespace)

	// Every rendering TestCharts checks, applied in turn to the same
	// objects as successive upgrades would; the spoke's last, for the runs
	// below.
	for _, c := range []struct{ name, chart string }{
		{"hub-defaults", "meshfed-hub"},
		{"hub-single", "meshfed-hub"},
		{"hub-user-affinity", "meshfed-hub"},
		{"hub-ha-xds", "meshfed-hub"},
		{"hub-services", "meshfed-hub"},
		{"hub-podmonitor", "meshfed-hub"},
		{"hub-monitoring", "meshfed-hub"},
		{"spoke-podmonitor", "meshfed-spoke"},
		{"spoke-hub-list", "meshfed-spoke"},
		{"spoke-mcp", "meshfed-spoke"},
		{"spoke-about", "meshfed-spoke"},
		{"spoke", "meshfed-spoke"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := renderChart(t, h, c.name, c.chart)
			api.applyRendered(t, out)
			api.checkStored(t, parse(t, out))
			// The properties name cluster east of clusterset prod: the
			// spokes below, each of a cluster of its own, would refuse to
			// start. The chart keeps them on uninstall; delete them.
			for _, p := range parse(t, out).clusterProperties {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(p.GroupVersionKind())
				u.SetName(p.Name)
				if err := api.resource(t, u).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}

	chart := parse(t, renderChart(t, h, "spoke", "meshfed-spoke"))
	if len(chart.clusterRoles) != 1 || len(chart.accounts) != 1 {
		t.Fatalf("got %d ClusterRoles and %d ServiceAccounts, want one each", len(chart.clusterRoles), len(chart.accounts))
	}
	role, account := chart.clusterRoles[0], chart.accounts[0]
	grants := rbacGrants(role.Rules)
	sa := api.serviceAccount(t, account)
	hb := startHub(t)

	if !t.Run("the spoke's token is bound by RBAC", func(t *testing.T) {
		sa.checkIdentity(t)
		sa.checkEnforced(t)
		api.checkOnlyChartGrants(t, account, chart.bindings, nil)
		sa.awaitAuthorization(t, grants, true)
	}) {
		return
	}

	// client-go streams a reflector's initial list over its watch
	// (WatchListClient), which the API server authorizes as a watch; with
	// it off, as against an API server without watch-list, the informers
	// LIST first.
	for _, mode := range []struct {
		name, id, ns, ip string
		env              []string
	}{
		{"", "east", "demo", "10.1.0.1", nil},
		{", listing", "east-list", "demo-list", "10.1.0.2", []string{"KUBE_FEATURE_WatchListClient=false"}},
	} {
		t.Run("spoke federates with the chart's RBAC"+mode.name, func(t *testing.T) {
			api.createEcho(t, mode.ns, mode.ip)
			p := startSpoke(t, sa.kubeconfig, hb.addr, mode.id, mode.env...)
			p.eventually(t, "the hub has cluster "+mode.id+" with "+mode.ns+"/echo's endpoint", func() bool {
				return hb.hasEndpoint(federation.ClusterID(mode.id), "n1", mode.ns+"/echo", mode.ip)
			})
			p.eventually(t, "the spoke sets the ServiceExport "+mode.ns+"/echo Valid", func() bool {
				c := api.validCondition(t, mode.ns, "echo")
				return c != nil && c.Status == metav1.ConditionTrue
			})
			if d := p.denials(t); len(d) != 0 {
				t.Errorf("the API server refused the spoke requests with the chart's ClusterRole:\n%s", strings.Join(d, "\n"))
			}
		})
	}

	t.Run("spoke records an Event on a rejected object with the chart's RBAC", func(t *testing.T) {
		api.createEcho(t, "demo-events", "10.1.0.3")
		// The API server admits an EndpointSlice port out of range; the
		// spoke rejects the slice and says so in an Event on it.
		api.createSlice(t, "demo-events", "echo-bad", 70000, "10.1.0.9")
		p := startSpoke(t, sa.kubeconfig, hb.addr, "east-events")
		var refused string
		p.eventually(t, "the spoke's Event on demo-events/echo-bad", func() bool {
			list, err := api.Client.CoreV1().Events("demo-events").List(t.Context(),
				metav1.ListOptions{FieldSelector: "involvedObject.name=echo-bad"})
			if err != nil {
				t.Fatal(err)
			}
			refused = p.denied(t, "create", "events")
			return len(list.Items) > 0 || refused != ""
		})
		if refused != "" {
			t.Fatalf("the spoke may not record Events with the chart's ClusterRole (it needs create on events):\n%s", refused)
		}
	})

	t.Run("the import writer writes with the chart's RBAC", func(t *testing.T) {
		p := exerciseImportWriter(t, api, sa, "imports")
		checkImportsWritten(t, api, p, "imports")
		if d := p.denials(t); len(d) != 0 {
			t.Errorf("the API server refused the import writer requests with the chart's ClusterRole:\n%s", strings.Join(d, "\n"))
		}
	})

	// Each grant of the chart's ClusterRole is needed: without it, the API
	// server refuses the spoke the request that needs it. The spokes run
	// one at a time, each with a namespace of its own, holding a
	// ServiceExport no spoke has set the status of.
	for i, g := range grants {
		t.Run("without "+g.String(), func(t *testing.T) {
			// No need to restore the chart's rules: each case applies its
			// own, and waits until the authorizer refuses its grant, which
			// the previous case's rules allowed.
			weakened := role.DeepCopy()
			weakened.Rules = g.revokedFrom(role.Rules)
			api.applyObject(t, toUnstructured(t, weakened))
			sa.awaitAuthorization(t, []grant{g}, false)

			ns := fmt.Sprintf("without-%d", i)
			if importWriteGrant(g) {
				p := exerciseImportWriter(t, api, sa, ns)
				p.eventually(t, "the API server to refuse the import writer "+g.String(), func() bool {
					return p.denied(t, g.verb, g.resource) != ""
				})
				return
			}
			api.createEcho(t, ns, "10.2.0.1")
			var env []string
			switch {
			case g.verb == "list":
				env = append(env, "KUBE_FEATURE_WatchListClient=false")
			case g.resource == "events":
				api.createSlice(t, ns, "echo-bad", 70000, "10.2.0.9")
			}
			p := startSpoke(t, sa.kubeconfig, hb.addr, fmt.Sprintf("weak-%d", i), env...)
			p.eventually(t, "the API server to refuse the spoke "+g.String(), func() bool {
				return p.denied(t, g.verb, g.resource) != ""
			})
			if g.resource == "serviceexports/status" {
				if c := api.validCondition(t, ns, "echo"); c != nil {
					t.Errorf("ServiceExport %s/echo has condition %+v, written without the status grant", ns, c)
				}
			}
		})
	}

	// Several spokes for one cluster elect a leader: the renderings that
	// run more than one pod, applied as upgrades would (which also
	// restores the ClusterRole), add a Role for the Lease.
	var elect rendered
	for _, name := range []string{"spoke-daemonset", "spoke-replicas"} {
		t.Run(name, func(t *testing.T) {
			out := renderChart(t, h, name, "meshfed-spoke")
			api.applyRendered(t, out)
			elect = parse(t, out)
			api.checkStored(t, elect)
		})
	}
	if len(elect.roles) != 1 || len(elect.roleBindings) != 1 {
		t.Fatalf("got %d Roles and %d RoleBindings, want one each", len(elect.roles), len(elect.roleBindings))
	}
	leaseRole := elect.roles[0]
	leaseGrants := rbacGrants(leaseRole.Rules, leaseRole.Namespace)
	if !t.Run("the spoke's token is bound by RBAC, with the Lease's Role", func(t *testing.T) {
		api.checkOnlyChartGrants(t, account, elect.bindings, elect.roleBindings)
		sa.awaitAuthorization(t, slices.Concat(grants, leaseGrants), true)
		// The Role grants the chart's Lease alone, in the release's namespace alone.
		sa.awaitAuthorization(t, []grant{
			{group: "coordination.k8s.io", resource: "leases", verb: "get", namespace: leaseRole.Namespace, name: "another"},
			{group: "coordination.k8s.io", resource: "leases", verb: "create", namespace: "kube-system"},
		}, false)
	}) {
		return
	}

	t.Run("spokes elect a leader with the chart's RBAC", func(t *testing.T) {
		api.createEcho(t, "demo-elect", "10.3.0.1")
		a := startSpokeArgs(t, sa.kubeconfig, hb.addr, "east-elect", electArgs)
		b := startSpokeArgs(t, sa.kubeconfig, hb.addr, "east-elect", electArgs)
		var leader, standby *spokeProcess
		poll(t, "a spoke to lead and the hub to have its cluster", func() bool {
			switch {
			case a.logged(t, msgLeading) && b.logged(t, msgLeading):
				t.Fatal("both spokes lead")
			case a.logged(t, msgLeading):
				leader, standby = a, b
			case b.logged(t, msgLeading):
				leader, standby = b, a
			}
			return leader != nil && hb.hasEndpoint("east-elect", "n1", "demo-elect/echo", "10.3.0.1")
		}, nil)
		if c := hb.status("east-elect"); c.Supersessions != 0 || c.DuplicateRefusals != 0 {
			t.Errorf("hub status %+v: the standby streamed", c)
		}
		// A crash: no release, so the standby waits out the lease.
		if err := leader.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		standby.eventually(t, "the standby to take over", func() bool { return standby.logged(t, msgLeading) })
		took := time.Since(killed)
		standby.eventually(t, "the hub to hear from the new leader", func() bool {
			c := hb.status("east-elect")
			return c.Connected && c.ConnectedSince.After(killed) && c.LastAck.After(c.ConnectedSince)
		})
		t.Logf("the standby led %v after the leader was killed (lease 3s, retry 250ms)", took.Round(time.Millisecond))
		if !hb.hasEndpoint("east-elect", "n1", "demo-elect/echo", "10.3.0.1") {
			t.Error("the hub lost the cluster's endpoint over the takeover")
		}
		for _, p := range []*spokeProcess{a, b} {
			if d := p.denials(t); len(d) != 0 {
				t.Errorf("the API server refused a spoke requests with the chart's RBAC:\n%s", strings.Join(d, "\n"))
			}
		}
	})

	// Each grant of the Lease's Role is needed: without it, the API server
	// refuses the electing spoke the request that needs it. The Lease is
	// deleted first, so that the spoke creates it (and can read it only
	// once it exists).
	for i, g := range leaseGrants {
		t.Run("without "+g.String(), func(t *testing.T) {
			weakened := leaseRole.DeepCopy()
			weakened.Rules = g.revokedFrom(leaseRole.Rules)
			api.applyObject(t, toUnstructured(t, weakened))
			sa.awaitAuthorization(t, []grant{g}, false)
			err := api.Client.CoordinationV1().Leases(leaseRole.Namespace).Delete(t.Context(), "meshfed-spoke", metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if g.verb != "create" {
				// The spoke gets before it creates: let it find one to get and update.
				api.createLease(t, leaseRole.Namespace, "meshfed-spoke")
			}
			p := startSpokeArgs(t, sa.kubeconfig, hb.addr, fmt.Sprintf("weak-lease-%d", i), electArgs)
			p.eventually(t, "the API server to refuse the spoke "+g.String(), func() bool {
				return p.denied(t, g.verb, g.resource) != ""
			})
			if p.logged(t, msgLeading) {
				t.Errorf("the spoke leads without %s", g)
			}
		})
	}

	// The remote secrets the spoke writes for istiod (remoteViews): the
	// writer the spoke runs, with the spoke's token under the chart's
	// Role, takes a Secret over, creates one and deletes one; without any
	// one grant, the API server refuses it the request that needs it.
	api.createNamespace(t, "istio-system")
	views := parse(t, renderChart(t, h, "spoke-remote-views", "meshfed-spoke"))
	api.applyRendered(t, renderChart(t, h, "spoke-remote-views", "meshfed-spoke"))
	api.checkStored(t, views)
	if len(views.roles) != 1 {
		t.Fatalf("got %d Roles, want the remote secrets' one", len(views.roles))
	}
	secretsRole := views.roles[0]
	secretsGrants := rbacGrants(secretsRole.Rules, secretsRole.Namespace)
	if !t.Run("remote secrets with the chart's Role", func(t *testing.T) {
		sa.awaitAuthorization(t, secretsGrants, true)
		w := exerciseRemoteSecrets(t, api, sa, "rbac-all-")
		w.until(t, "the remote secrets written", func() bool {
			a, errA := api.Client.CoreV1().Secrets("istio-system").Get(t.Context(), "rbac-all-a", metav1.GetOptions{})
			_, errB := api.Client.CoreV1().Secrets("istio-system").Get(t.Context(), "rbac-all-b", metav1.GetOptions{})
			return errA == nil && a.Labels[remoteview.LabelRemoteView] == "a" && len(a.OwnerReferences) == 1 && errB == nil
		})
		w.next()
		w.until(t, "a's secret deleted", func() bool {
			_, err := api.Client.CoreV1().Secrets("istio-system").Get(t.Context(), "rbac-all-a", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if d := w.denials(); len(d) != 0 {
			t.Errorf("the API server refused the writer with the chart's Role:\n%s", strings.Join(d, "\n"))
		}
	}) {
		return
	}
	for i, g := range secretsGrants {
		t.Run("remote secrets without "+g.String(), func(t *testing.T) {
			weakened := secretsRole.DeepCopy()
			weakened.Rules = g.revokedFrom(secretsRole.Rules)
			api.applyObject(t, toUnstructured(t, weakened))
			sa.awaitAuthorization(t, []grant{g}, false)
			w := exerciseRemoteSecrets(t, api, sa, fmt.Sprintf("rbac-%d-", i))
			w.until(t, "the API server to refuse the writer "+g.String(), func() bool {
				if g.verb == "delete" && !w.moved && w.denied(g.verb, g.resource) == "" {
					// Deleting comes once a member goes: let it go once
					// the others are written.
					if _, err := api.Client.CoreV1().Secrets("istio-system").Get(t.Context(), fmt.Sprintf("rbac-%d-b", i), metav1.GetOptions{}); err == nil {
						w.next()
					}
				}
				return w.denied(g.verb, g.resource) != ""
			})
		})
	}
}

// secretsRun is a remote secrets writer running with a ServiceAccount's
// token: its members are "a" and "b", then "b" alone (next); a Secret of
// a's name, not meshfed's, is there first, for the writer to take over.
type secretsRun struct {
	mu      sync.Mutex
	ids     []federation.ClusterID
	changed chan struct{}
	log     *bytes.Buffer
	logMu   *sync.Mutex
	moved   bool
}

func exerciseRemoteSecrets(t *testing.T, api *apiServer, sa *serviceAccount, prefix string) *secretsRun {
	t.Helper()
	if _, err := api.Client.CoreV1().Secrets("istio-system").Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "a", Labels: map[string]string{remoteview.LabelMultiCluster: "true"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &secretsRun{ids: []federation.ClusterID{"a", "b"}, changed: make(chan struct{}), log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	log := slog.New(slog.NewJSONHandler(lockedWriter{w.logMu, w.log}, nil))
	// The spoke's own client: its core REST client, with the token.
	cfg, err := clientcmd.BuildConfigFromFlags("", sa.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := kubeclient.New(cfg, kubeclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := remoteview.NewSecrets(remoteview.RESTSecrets(clients.Core, "istio-system"),
		remoteview.SecretsConfig{
			URL: "https://meshfed-spoke-views.meshfed.svc:15012", CA: []byte("ca"), Token: "t", Prefix: prefix,
			Owner: "meshfed-spoke-remote-secrets", RetryAfter: 100 * time.Millisecond,
		},
		w.members, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return w
}

func (w *secretsRun) members() ([]federation.ClusterID, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ids, w.changed
}

// next lets "a" go.
func (w *secretsRun) next() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ids, w.moved = []federation.ClusterID{"b"}, true
	close(w.changed)
	w.changed = make(chan struct{})
}

// denials returns the writer's log lines that report a forbidden request.
func (w *secretsRun) denials() []string {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	return denialsIn(w.log.Bytes())
}

// denied returns a denial of verb on resource, or "".
func (w *secretsRun) denied(verb, resource string) string {
	return deniedIn(w.denials(), verb, resource)
}

func (w *secretsRun) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll(t, what, cond, nil)
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// electArgs run a spoke under leader election on the spoke chart's Lease,
// with short timings.
var electArgs = []string{
	"--leader-elect", "--leader-elect-namespace", namespace, "--leader-elect-lease-name", "meshfed-spoke",
	"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms",
}

// msgLeading is what a spoke logs when it takes the Lease.
const msgLeading = "leading: this spoke streams to the hub and writes into the cluster"

// renderChart renders a chart with testdata/<name>.values.yaml, as
// TestCharts does.
func renderChart(t *testing.T, h helm, name, chart string) string {
	t.Helper()
	values := filepath.Join("testdata", name+".values.yaml")
	out, err := h.run(t, "template", chart, chart, "--namespace", namespace, "--values", values)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", chart, err, out)
	}
	return out
}
