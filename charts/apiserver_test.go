package charts_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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

	"github.com/meshfed/meshfed/internal/kubetest"
)

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
