package charts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
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
		{"spoke", "meshfed-spoke"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := renderChart(t, h, c.name, c.chart)
			api.applyRendered(t, out)
			api.checkStored(t, parse(t, out))
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
}

// electArgs run a spoke under leader election on the spoke chart's Lease,
// with short timings.
var electArgs = []string{
	"--leader-elect", "--leader-elect-namespace", namespace, "--leader-elect-lease-name", "meshfed-spoke",
	"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms",
}

// msgLeading is what a spoke logs when it takes the Lease.
const msgLeading = "leading: this spoke streams to the hub and writes into the cluster"

// createLease creates a Lease no one holds.
func (a *apiServer) createLease(t *testing.T, ns, name string) {
	t.Helper()
	_, err := a.Client.CoordinationV1().Leases(ns).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

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

// apiServer is a test cluster with a client for any kind of object.
type apiServer struct {
	*kubetest.Cluster
	dynamic dynamic.Interface
	mapper  meta.RESTMapper
}

func newAPIServer(t *testing.T, c *kubetest.Cluster) *apiServer {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{
		Cluster: c, dynamic: dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery())),
	}
}

func (a *apiServer) createNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := a.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// installCRDs applies the CustomResourceDefinitions in path and waits
// until the API server serves them.
func (a *apiServer) installCRDs(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range manifests(t, string(data)) {
		a.applyObject(t, crd)
		poll(t, "CRD "+crd.GetName()+" established", func() bool {
			got, err := a.resource(t, crd).Get(t.Context(), crd.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			return slices.ContainsFunc(conditions, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			})
		}, nil)
	}
	a.mapper.(*restmapper.DeferredDiscoveryRESTMapper).Reset()
}

// applyRendered applies every object of a rendering, twice: the second
// time must change nothing (no field the API server rewrites, which would
// show as a diff at every upgrade).
func (a *apiServer) applyRendered(t *testing.T, out string) {
	t.Helper()
	objs := manifests(t, out)
	versions := map[string]string{}
	for _, u := range objs {
		versions[describe(u)] = a.applyObject(t, u).GetResourceVersion()
	}
	for _, u := range objs {
		if v := a.applyObject(t, u).GetResourceVersion(); v != versions[describe(u)] {
			t.Errorf("%s: applying it again changed it (resourceVersion %s → %s)", describe(u), versions[describe(u)], v)
		}
	}
	for _, u := range objs {
		stored, err := a.resource(t, u).Get(t.Context(), u.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", describe(u), err)
		}
		if diffs := missing(describe(u), u.Object, stored.Object); len(diffs) != 0 {
			t.Errorf("the API server did not store what was applied:\n%s", strings.Join(diffs, "\n"))
		}
	}
}

// manifests decodes a rendering into one object per document.
func manifests(t *testing.T, out string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range docSeparator.Split(out, -1) {
		data, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if string(data) == "null" {
			continue // comments only
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatalf("not an object: %v\n%s", err, doc)
		}
		objs = append(objs, u)
	}
	if len(objs) == 0 {
		t.Fatal("the rendering has no objects")
	}
	return objs
}

func describe(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return u.GetKind() + " " + ns + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}

// resource returns the client of u's kind, in u's namespace (the release's
// when the chart sets none, as helm would).
func (a *apiServer) resource(t *testing.T, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: the API server does not serve %s: %v", describe(u), gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		if u.GetNamespace() != "" {
			t.Errorf("%s: a namespace on a cluster-scoped object", describe(u))
		}
		return a.dynamic.Resource(m.Resource)
	}
	ns := u.GetNamespace()
	if ns == "" {
		ns = namespace
	}
	return a.dynamic.Resource(m.Resource).Namespace(ns)
}

// applyObject applies u with strict field validation: an unknown or
// duplicate field fails, as it would not in a client-side apply.
func (a *apiServer) applyObject(t *testing.T, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.resource(t, u).Patch(t.Context(), u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
		FieldManager: fieldManager, FieldValidation: metav1.FieldValidationStrict,
	})
	if err != nil {
		t.Fatalf("server-side apply of %s: %v", describe(u), err)
	}
	return got
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	delete(u.Object["metadata"].(map[string]any), "creationTimestamp")
	return u
}

// missing lists where got lacks or differs from want: the API server may
// add defaults, but must keep all it was sent, else a field of the chart
// does nothing (dropped, or overwritten by the server).
func missing(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: stored %v, want an object", path, got)}
		}
		var out []string
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if w[k] == nil {
				continue // null: the same as absent
			}
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s.%s: not stored, want %v", path, k, w[k]))
				continue
			}
			out = append(out, missing(path+"."+k, w[k], gv)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: stored %v, want %v", path, got, want)}
		}
		var out []string
		for i := range w {
			out = append(out, missing(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if want != got {
			return []string{fmt.Sprintf("%s: stored %v (%T), want %v (%T)", path, got, got, want, want)}
		}
		return nil
	}
}

// checkStored reads the rendered objects back through the typed clients.
func (a *apiServer) checkStored(t *testing.T, r rendered) {
	t.Helper()
	ctx := t.Context()
	for _, want := range r.deployments {
		got, err := a.Client.AppsV1().Deployments(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Deployment %s: %v", want.Name, err)
		}
		type container struct {
			Name, Image string
			Args        []string
		}
		containers := func(cs []corev1.Container) []container {
			var out []container
			for _, c := range cs {
				out = append(out, container{c.Name, c.Image, c.Args})
			}
			return out
		}
		wantPod, gotPod := want.Spec.Template.Spec, got.Spec.Template.Spec
		if len(gotPod.Containers) == 0 {
			t.Errorf("Deployment %s: no containers stored", want.Name)
		}
		if diff := cmp.Diff(containers(wantPod.Containers), containers(gotPod.Containers)); diff != "" {
			t.Errorf("Deployment %s: containers (-rendered +stored):\n%s", want.Name, diff)
		}
		if gotPod.ServiceAccountName != wantPod.ServiceAccountName || *got.Spec.Replicas != *want.Spec.Replicas {
			t.Errorf("Deployment %s: serviceAccountName %q, replicas %d; rendered %q, %d", want.Name,
				gotPod.ServiceAccountName, *got.Spec.Replicas, wantPod.ServiceAccountName, *want.Spec.Replicas)
		}
	}
	for _, want := range r.daemonSets {
		got, err := a.Client.AppsV1().DaemonSets(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("DaemonSet %s: %v", want.Name, err)
		}
		if diff := cmp.Diff(want.Spec.Template.Spec.Containers[0].Args, got.Spec.Template.Spec.Containers[0].Args); diff != "" {
			t.Errorf("DaemonSet %s: args (-rendered +stored):\n%s", want.Name, diff)
		}
		if diff := cmp.Diff(want.Spec.Template.Spec.NodeSelector, got.Spec.Template.Spec.NodeSelector); diff != "" {
			t.Errorf("DaemonSet %s: nodeSelector (-rendered +stored):\n%s", want.Name, diff)
		}
	}
	for _, want := range r.roles {
		got, err := a.Client.RbacV1().Roles(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Role %s: %v", want.Name, err)
		}
		if diff := cmp.Diff(want.Rules, got.Rules); diff != "" {
			t.Errorf("Role %s rules (-rendered +stored):\n%s", want.Name, diff)
		}
	}
	for _, want := range r.roleBindings {
		got, err := a.Client.RbacV1().RoleBindings(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("RoleBinding %s: %v", want.Name, err)
		}
		if diff := cmp.Diff(want.Subjects, got.Subjects); diff != "" {
			t.Errorf("RoleBinding %s subjects (-rendered +stored):\n%s", want.Name, diff)
		}
	}
	for _, want := range r.accounts {
		if _, err := a.Client.CoreV1().ServiceAccounts(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("ServiceAccount %s: %v", want.Name, err)
		}
	}
	for _, want := range r.clusterRoles {
		got, err := a.Client.RbacV1().ClusterRoles().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ClusterRole %s: %v", want.Name, err)
		}
		if diff := cmp.Diff(want.Rules, got.Rules); diff != "" {
			t.Errorf("ClusterRole %s rules (-rendered +stored):\n%s", want.Name, diff)
		}
	}
	for _, want := range r.bindings {
		got, err := a.Client.RbacV1().ClusterRoleBindings().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ClusterRoleBinding %s: %v", want.Name, err)
		}
		if diff := cmp.Diff(want.RoleRef, got.RoleRef); diff != "" {
			t.Errorf("ClusterRoleBinding %s roleRef (-rendered +stored):\n%s", want.Name, diff)
		}
		if diff := cmp.Diff(want.Subjects, got.Subjects); diff != "" {
			t.Errorf("ClusterRoleBinding %s subjects (-rendered +stored):\n%s", want.Name, diff)
		}
	}
}

// checkOnlyChartGrants asserts that nothing but the chart's bindings names
// the ServiceAccount or a group of ServiceAccounts it is in: what the
// spoke may do then is the chart's ClusterRole (and Role, when it renders
// one), plus what the API server grants every authenticated user
// (discovery, and reviews of itself).
func (a *apiServer) checkOnlyChartGrants(t *testing.T, account corev1.ServiceAccount, chartBindings []rbacv1.ClusterRoleBinding, chartRoleBindings []rbacv1.RoleBinding) {
	t.Helper()
	ctx := t.Context()
	names := func(s rbacv1.Subject) bool {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			return s.Name == account.Name && s.Namespace == account.Namespace
		case rbacv1.GroupKind:
			return s.Name == "system:serviceaccounts" || s.Name == "system:serviceaccounts:"+account.Namespace
		case rbacv1.UserKind:
			return s.Name == serviceAccountUser(account)
		}
		return false
	}
	crbs, err := a.Client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		// The API server's own, which every cluster has: discovery of the
		// ServiceAccount issuer and of trust bundles, for every account.
		if b.Labels["kubernetes.io/bootstrapping"] == "rbac-defaults" {
			continue
		}
		if slices.ContainsFunc(b.Subjects, names) &&
			!slices.ContainsFunc(chartBindings, func(c rbacv1.ClusterRoleBinding) bool { return c.Name == b.Name }) {
			t.Errorf("ClusterRoleBinding %s, not the chart's, grants the spoke's ServiceAccount %s", b.Name, b.RoleRef.Name)
		}
	}
	rbs, err := a.Client.RbacV1().RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rbs.Items {
		chart := slices.ContainsFunc(chartRoleBindings, func(c rbacv1.RoleBinding) bool { return c.Namespace == b.Namespace && c.Name == b.Name })
		if slices.ContainsFunc(b.Subjects, names) && !chart {
			t.Errorf("RoleBinding %s/%s grants the spoke's ServiceAccount %s", b.Namespace, b.Name, b.RoleRef.Name)
		}
	}
}

func serviceAccountUser(sa corev1.ServiceAccount) string {
	return "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
}

// createEcho creates namespace ns with the exported Service echo and one
// EndpointSlice with a ready endpoint at ip.
func (a *apiServer) createEcho(t *testing.T, ns, ip string) {
	t.Helper()
	ctx := t.Context()
	a.createNamespace(t, ns)
	_, err := a.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.createSlice(t, ns, "echo-1", 8080, ip)
	_, err = a.MCS.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, &mcsv1alpha1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (a *apiServer) createSlice(t *testing.T, ns, name string, port int32, ip string) {
	t.Helper()
	_, err := a.Client.DiscoveryV1().EndpointSlices(ns).Create(t.Context(), &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// validCondition returns the MCS Valid condition of a ServiceExport, nil
// when it has none.
func (a *apiServer) validCondition(t *testing.T, ns, name string) *metav1.Condition {
	t.Helper()
	se, err := a.MCS.MulticlusterV1alpha1().ServiceExports(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(se.Status.Conditions, string(mcsv1alpha1.ServiceExportConditionValid))
}

// serviceAccount is a ServiceAccount's token, as a kubeconfig file and as
// a client.
type serviceAccount struct {
	account    corev1.ServiceAccount
	kubeconfig string
	client     kubernetes.Interface
	mcs        mcsclientset.Interface
}

// serviceAccount gets a token for account through the TokenRequest API, as
// the kubelet does for the spoke's pod.
func (a *apiServer) serviceAccount(t *testing.T, account corev1.ServiceAccount) *serviceAccount {
	t.Helper()
	tr, err := a.Client.CoreV1().ServiceAccounts(account.Namespace).CreateToken(t.Context(), account.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: a.Config.Host, CertificateAuthorityData: a.Config.CAData}
	kc.AuthInfos["spoke"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["spoke"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "spoke"}
	kc.CurrentContext = "spoke"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	rc := &rest.Config{Host: a.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: a.Config.CAData}}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	mcs, err := mcsclientset.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &serviceAccount{account: account, kubeconfig: path, client: client, mcs: mcs}
}

// checkIdentity asserts that the API server takes the token for the
// ServiceAccount (not, say, for an anonymous user).
func (sa *serviceAccount) checkIdentity(t *testing.T) {
	t.Helper()
	r, err := sa.client.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Status.UserInfo.Username, serviceAccountUser(sa.account); got != want {
		t.Fatalf("the token authenticates as %q, want %q", got, want)
	}
}

// checkEnforced asserts that the API server authorizes the token's
// requests: what the ClusterRole grants is allowed, the rest forbidden.
func (sa *serviceAccount) checkEnforced(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	if _, err := sa.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list services, which the ClusterRole grants: %v", err)
	}
	refused := map[string]error{}
	_, refused["list secrets"] = sa.client.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	_, refused["create a pod"] = sa.client.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}},
	}, metav1.CreateOptions{})
	_, refused["create a ServiceExport"] = sa.mcs.MulticlusterV1alpha1().ServiceExports(namespace).Create(ctx,
		&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{})
	for _, what := range slices.Sorted(maps.Keys(refused)) {
		if err := refused[what]; !apierrors.IsForbidden(err) {
			t.Errorf("%s with the spoke's token: %v, want forbidden (is RBAC enforced?)", what, err)
		}
	}
}

// grant is one verb on one resource, as a SubjectAccessReview asks: in a
// namespace ("": all, or a cluster-scoped resource), on a named object
// ("": any).
type grant struct {
	group, resource, verb string
	namespace, name       string
}

func (g grant) String() string {
	s := g.verb + " " + g.resource
	if g.group != "" {
		s += "." + g.group
	}
	if g.name != "" {
		s += " " + g.name
	}
	if g.namespace != "" {
		s += " in " + g.namespace
	}
	return s
}

// rbacGrants lists the verbs that rules grant in namespace ("": a
// ClusterRole's), one per resource and name.
func rbacGrants(rules []rbacv1.PolicyRule, namespace ...string) []grant {
	ns := ""
	if len(namespace) > 0 {
		ns = namespace[0]
	}
	var out []grant
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, group := range r.APIGroups {
			for _, res := range r.Resources {
				for _, verb := range r.Verbs {
					for _, name := range names {
						out = append(out, grant{group: group, resource: res, verb: verb, namespace: ns, name: name})
					}
				}
			}
		}
	}
	return out
}

// revokedFrom returns rules without g, and everything else they grant.
func (g grant) revokedFrom(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		if !slices.Contains(r.APIGroups, g.group) || !slices.Contains(r.Resources, g.resource) || !slices.Contains(r.Verbs, g.verb) {
			out = append(out, r)
			continue
		}
		if others := slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return s == g.resource }); len(others) != 0 {
			rest := *r.DeepCopy()
			rest.Resources = others
			out = append(out, rest)
		}
		if verbs := slices.DeleteFunc(slices.Clone(r.Verbs), func(s string) bool { return s == g.verb }); len(verbs) != 0 {
			one := *r.DeepCopy()
			one.Resources, one.Verbs = []string{g.resource}, verbs
			out = append(out, one)
		}
	}
	return out
}

// awaitAuthorization waits until the API server's authorizer, which
// follows RBAC objects through a watch, allows (or refuses) each grant to
// the ServiceAccount: then the spoke started next meets the rules applied.
func (sa *serviceAccount) awaitAuthorization(t *testing.T, grants []grant, allowed bool) {
	t.Helper()
	for _, g := range grants {
		res, sub, _ := strings.Cut(g.resource, "/")
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: g.group, Resource: res, Subresource: sub, Verb: g.verb, Namespace: g.namespace, Name: g.name,
			},
		}}
		poll(t, fmt.Sprintf("the authorizer to answer allowed=%t to %s", allowed, g), func() bool {
			r, err := sa.client.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), review, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return r.Status.Allowed == allowed
		}, nil)
	}
}

// testHub is an in-process hub for the spokes to stream to.
type testHub struct {
	addr string
	reg  *registry.Registry
}

func startHub(t *testing.T) *testHub {
	t.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "", "127.0.0.1:0"
	h, err := hub.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	// t.Context ends before the cleanups run, and with it the hub.
	go func() { done <- h.Run(t.Context()) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	return &testHub{addr: h.FederationAddr().String(), reg: h.Registry()}
}

// hasEndpoint tells whether the hub has the cluster, connected, on its
// network, with addr among the endpoints it exports for service.
func (h *testHub) hasEndpoint(cluster federation.ClusterID, network federation.NetworkID, service, addr string) bool {
	if !slices.ContainsFunc(h.reg.Status(), func(s registry.ClusterStatus) bool { return s.ID == cluster && s.Connected }) {
		return false
	}
	s := h.reg.Current()
	if info, ok := s.Cluster(cluster); !ok || info.Network != network {
		return false
	}
	v, ok := s.Service(service)
	if !ok {
		return false
	}
	for _, c := range v.Clusters {
		if c.Cluster == cluster && slices.ContainsFunc(c.Endpoints, func(e clusterset.TaggedEndpoint) bool { return e.GetAddress() == addr }) {
			return true
		}
	}
	return false
}

// status returns the hub's status of a cluster (zero when it has none).
func (h *testHub) status(cluster federation.ClusterID) registry.ClusterStatus {
	for _, s := range h.reg.Status() {
		if s.ID == cluster {
			return s
		}
	}
	return registry.ClusterStatus{}
}

var (
	spokeBuild    sync.Once
	spokeBin      string
	errSpokeBuild error
)

// spokeBinary builds cmd/meshfed-spoke, the binary the chart's image runs,
// once per test binary, into the repository's git-ignored cache.
func spokeBinary(t *testing.T) string {
	t.Helper()
	spokeBuild.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", ".cache", "charts"))
		if err != nil {
			errSpokeBuild = err
			return
		}
		spokeBin = filepath.Join(dir, "meshfed-spoke")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", spokeBin, "github.com/meshfed/meshfed/cmd/meshfed-spoke").CombinedOutput()
		if err != nil {
			errSpokeBuild = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if errSpokeBuild != nil {
		t.Fatal(errSpokeBuild)
	}
	return spokeBin
}

// spokeProcess is a running meshfed-spoke, killed when the test ends.
type spokeProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // how it exited, once done is closed
}

// startSpoke runs meshfed-spoke on the cluster of kubeconfig, with env
// added to the test's environment.
func startSpoke(t *testing.T, kubeconfig, hubAddr, clusterID string, env ...string) *spokeProcess {
	t.Helper()
	return startSpokeArgs(t, kubeconfig, hubAddr, clusterID, nil, env...)
}

// startSpokeArgs is startSpoke with further arguments.
func startSpokeArgs(t *testing.T, kubeconfig, hubAddr, clusterID string, args []string, env ...string) *spokeProcess {
	t.Helper()
	p := &spokeProcess{log: filepath.Join(t.TempDir(), "spoke.log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	// Debug logs show the Event writes the spoke retries; JSON keeps the
	// API server's error message intact for denied.
	cmd := exec.Command(spokeBinary(t), slices.Concat([]string{
		"--kubeconfig", kubeconfig,
		"--insecure", "--cluster-id", clusterID, "--network", "n1", "--hub", hubAddr, "--export", "exported",
		"--log-level", "debug", "--log-format", "json",
	}, args)...)
	p.cmd = cmd
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("spoke %s's log:\n%s", clusterID, p.tail())
		}
	})
	return p
}

func (p *spokeProcess) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 16<<10 {
		b = b[len(b)-16<<10:]
	}
	return string(b)
}

// logged tells whether the spoke has logged msg.
func (p *spokeProcess) logged(t *testing.T, msg string) bool {
	t.Helper()
	data, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		var rec struct{ Msg string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == msg {
			return true
		}
	}
	return false
}

// forbidden matches the API server's message for a request RBAC refuses.
var forbidden = regexp.MustCompile(`forbidden: User "[^"]+" cannot (\S+) resource "([^"]+)"`)

// denials returns the spoke's log lines that report a request the API
// server refused for want of permission.
func (p *spokeProcess) denials(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range bytes.Lines(data) {
		var rec struct{ Msg, Err string }
		if json.Unmarshal(line, &rec) != nil {
			continue // a line the spoke is still writing
		}
		if forbidden.MatchString(rec.Err) {
			out = append(out, string(bytes.TrimSpace(line)))
		}
	}
	return out
}

// denied returns the first log line where the API server refused the
// spoke verb on resource, or "".
func (p *spokeProcess) denied(t *testing.T, verb, resource string) string {
	t.Helper()
	for _, line := range p.denials(t) {
		var rec struct{ Err string }
		_ = json.Unmarshal([]byte(line), &rec)
		if m := forbidden.FindStringSubmatch(rec.Err); m[1] == verb && m[2] == resource {
			return line
		}
	}
	return ""
}

// eventually waits for cond while the spoke runs.
func (p *spokeProcess) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll(t, what, cond, p)
}

// poll calls cond until it holds, failing the test after waitLimit or
// when p, if set, exits.
func poll(t *testing.T, what string, cond func() bool, p *spokeProcess) {
	t.Helper()
	ok := testwait.Within(waitLimit, func() (bool, string) {
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("the spoke exited (%v) while waiting for %s", p.err, what)
			default:
			}
		}
		return cond(), ""
	})
	if !ok {
		t.Fatalf("waited %v for %s", waitLimit, what)
	}
}
