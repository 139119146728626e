package dnstest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/internal/kubetest"
)

// TestServiceImports writes what an MCS implementation writes into a
// cluster (ServiceImports, as v1beta1, and EndpointSlices labelled with the
// MCS service name and source cluster) and resolves the clusterset.local
// names through CoreDNS, which reads ServiceImports as v1alpha1.
func TestServiceImports(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	f := &fixture{c, Start(t, c)}
	t.Run("ClusterSetIP", f.clusterSetIP)
	t.Run("Headless", f.headless)
	t.Run("V1alpha1View", f.v1alpha1View)
	t.Run("Namespace", f.namespace)
	t.Run("RBAC", f.rbac)
}

// fixture is what the subtests share: an API server, and CoreDNS reading
// it as its administrator. Each subtest works in namespaces of its own.
type fixture struct {
	c *kubetest.Cluster
	s *Server
}

// A ClusterSetIP import answers its ServiceImport's IPs (A, AAAA) and ports
// (SRV); no Service of its name is needed, and its endpoints have names too.
func (f *fixture) clusterSetIP(t *testing.T) {
	c, s := f.c, f.s
	const ns = "clusterset-ip"
	createNamespace(t, c, ns)
	createImport(t, c, clusterSetIPImport(ns, "echo"))
	createSlice(t, c, ns, "echo", "east", discoveryv1.AddressTypeIPv4, []endpoint{{ip: "10.1.0.5"}})

	svc := "echo." + ns + ".svc." + ClusterSetZone
	s.WaitFor(t, svc, dns.TypeA, Answer{"NOERROR", []string{"10.200.0.10"}})
	s.WaitFor(t, svc, dns.TypeAAAA, Answer{"NOERROR", []string{"fd00:200::10"}})
	// One SRV record per port, naming the service (whose A and AAAA come
	// as additional records); the weights are shared out among the
	// (IP, port) pairs before the two IPs' records collapse into one.
	s.WaitFor(t, "_grpc._tcp."+svc, dns.TypeSRV, Answer{"NOERROR", []string{"0 50 8080 " + svc + "."}})
	s.WaitFor(t, "_dns._udp."+svc, dns.TypeSRV, Answer{"NOERROR", []string{"0 50 53 " + svc + "."}})
	s.WaitFor(t, svc, dns.TypeSRV, Answer{"NOERROR", []string{"0 25 8080 " + svc + ".", "0 25 53 " + svc + "."}})
	s.WaitFor(t, "_http._tcp."+svc, dns.TypeSRV, Answer{Rcode: "NXDOMAIN"})
	// An endpoint of a ClusterSetIP import is named as a headless one's.
	s.WaitFor(t, "10-1-0-5.east."+svc, dns.TypeA, Answer{"NOERROR", []string{"10.1.0.5"}})
	// The import is not a Service of the cluster's own zone.
	s.WaitFor(t, "echo."+ns+".svc."+ClusterZone, dns.TypeA, Answer{Rcode: "NXDOMAIN"})
}

// A headless import answers every ready endpoint address of every source
// cluster, and <hostname>.<cluster>.<service> one endpoint; the cluster is
// the EndpointSlice's multicluster.kubernetes.io/source-cluster label.
func (f *fixture) headless(t *testing.T) {
	c, s := f.c, f.s
	const ns = "headless"
	createNamespace(t, c, ns)
	createImport(t, c, &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:       mcsv1beta1.Headless,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports:      []mcsv1beta1.ServicePort{{Name: "sql", Protocol: corev1.ProtocolTCP, Port: 5432}},
		},
		Status: mcsv1beta1.ServiceImportStatus{Clusters: []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}},
	})
	createSlice(t, c, ns, "db", "east", discoveryv1.AddressTypeIPv4, []endpoint{
		{ip: "10.1.0.11", hostname: "db-0", ready: ptr.To(true)},
		{ip: "10.1.0.12", hostname: "db-1", ready: ptr.To(false)},
	})
	createSlice(t, c, ns, "db", "west", discoveryv1.AddressTypeIPv4, []endpoint{
		{ip: "10.2.0.11", hostname: "db-0"}, // no Ready condition: ready
		{ip: "10.2.0.12", ready: ptr.To(true)},
	})
	createSlice(t, c, ns, "db", "west", discoveryv1.AddressTypeIPv6, []endpoint{
		{ip: "fd00:2::11", hostname: "db-0", ready: ptr.To(true)},
	})

	svc := "db." + ns + ".svc." + ClusterSetZone
	s.WaitFor(t, svc, dns.TypeA, Answer{"NOERROR", []string{"10.1.0.11", "10.2.0.11", "10.2.0.12"}})
	s.WaitFor(t, svc, dns.TypeAAAA, Answer{"NOERROR", []string{"fd00:2::11"}})
	s.WaitFor(t, "db-0.east."+svc, dns.TypeA, Answer{"NOERROR", []string{"10.1.0.11"}})
	s.WaitFor(t, "db-0.west."+svc, dns.TypeA, Answer{"NOERROR", []string{"10.2.0.11"}})
	s.WaitFor(t, "db-0.west."+svc, dns.TypeAAAA, Answer{"NOERROR", []string{"fd00:2::11"}})
	// An endpoint without a hostname is named by its dashed address.
	s.WaitFor(t, "10-2-0-12.west."+svc, dns.TypeA, Answer{"NOERROR", []string{"10.2.0.12"}})
	// Not ready: no address, no name.
	s.WaitFor(t, "db-1.east."+svc, dns.TypeA, Answer{Rcode: "NXDOMAIN"})
	// A hostname is only a name with its cluster.
	s.WaitFor(t, "db-0."+svc, dns.TypeA, Answer{Rcode: "NXDOMAIN"})
	s.WaitFor(t, "db-0.north."+svc, dns.TypeA, Answer{Rcode: "NXDOMAIN"})
	// One SRV record per endpoint name; the weights are shared out among
	// the four addresses before db-0.west's two collapse into one record.
	s.WaitFor(t, "_sql._tcp."+svc, dns.TypeSRV, Answer{"NOERROR", []string{
		"0 25 5432 db-0.east." + svc + ".",
		"0 25 5432 db-0.west." + svc + ".",
		"0 25 5432 10-2-0-12.west." + svc + ".",
	}})

	// A readiness change reaches the answers.
	updateSliceReady(t, c, ns, "db", "east", "10.1.0.12", true)
	s.WaitFor(t, "db-1.east."+svc, dns.TypeA, Answer{"NOERROR", []string{"10.1.0.12"}})
}

// A ServiceImport stored as v1beta1 reads through v1alpha1 (as CoreDNS
// reads it) with the same spec, status and metadata, managedFields
// included: the CRD has no conversion webhook, and both versions' schemas
// are the same, so only apiVersion changes.
func (f *fixture) v1alpha1View(t *testing.T) {
	c, s := f.c, f.s
	const ns = "versions"
	createNamespace(t, c, ns)
	imp := clusterSetIPImport(ns, "echo")
	imp.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	imp.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
	imp.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	imp.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
	imp.Spec.Ports[0].AppProtocol = ptr.To("kubernetes.io/h2c")
	imp.Status.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsPresent
	imp.Status.Conditions = []metav1.Condition{{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Imported", Message: "from east and west",
		ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)),
	}}
	createImport(t, c, imp)

	read := func(version string) map[string]any {
		t.Helper()
		data, err := c.Client.CoreV1().RESTClient().Get().
			AbsPath("/apis", mcsv1beta1.GroupName, version, "namespaces", ns, "serviceimports", "echo").
			SetHeader("Accept", "application/json").DoRaw(t.Context())
		if err != nil {
			t.Fatalf("GET %s ServiceImport: %v", version, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatalf("%s ServiceImport: %v", version, err)
		}
		return obj
	}
	alpha, beta := read("v1alpha1"), read("v1beta1")
	if got, want := alpha["apiVersion"], mcsv1beta1.GroupName+"/v1alpha1"; got != want {
		t.Errorf("read through v1alpha1: apiVersion %v, want %v", got, want)
	}
	if got, want := beta["apiVersion"], mcsv1beta1.GroupName+"/v1beta1"; got != want {
		t.Errorf("read through v1beta1: apiVersion %v, want %v", got, want)
	}
	for _, field := range []string{"spec", "status", "metadata"} {
		if diff := cmp.Diff(beta[field], alpha[field]); diff != "" {
			t.Errorf("%s differs between v1beta1 and v1alpha1 (-v1beta1 +v1alpha1):\n%s", field, diff)
		}
	}
	// Nothing was dropped on the way in either: every field written is
	// there.
	wantJSON, err := json.Marshal(imp)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(wantJSON, &want); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"spec", "status"} {
		if diff := cmp.Diff(want[field], alpha[field]); diff != "" {
			t.Errorf("%s read through v1alpha1 differs from what was written (-written +read):\n%s", field, diff)
		}
	}
	s.WaitFor(t, "echo."+ns+".svc."+ClusterSetZone, dns.TypeAAAA, Answer{"NOERROR", []string{"fd00:200::10"}})
}

// CoreDNS answers only in namespaces it sees: a ServiceImport whose
// Namespace object is gone (the API server refuses to create one in a
// namespace that does not exist, but keeps one when its namespace is
// deleted without a namespace controller to empty it) is NXDOMAIN.
func (f *fixture) namespace(t *testing.T) {
	c, s := f.c, f.s
	ctx := t.Context()
	const ns = "gone"
	if _, err := c.MCS.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, clusterSetIPImport(ns, "echo"), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("create a ServiceImport in a namespace that does not exist: %v, want NotFound", err)
	}
	createNamespace(t, c, ns)
	createImport(t, c, clusterSetIPImport(ns, "echo"))
	svc := "echo." + ns + ".svc." + ClusterSetZone
	s.WaitFor(t, svc, dns.TypeA, Answer{"NOERROR", []string{"10.200.0.10"}})

	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// No namespace controller: finalize the namespace ourselves, which
	// removes it and leaves its objects in storage.
	namespace, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	namespace.Spec.Finalizers = nil
	if _, err := c.Client.CoreV1().Namespaces().Finalize(ctx, namespace, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s after finalizing: %v, want NotFound", ns, err)
	}
	if _, err := c.MCS.MulticlusterV1alpha1().ServiceImports(ns).Get(ctx, "echo", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ServiceImport outlives its namespace: %v", err)
	}
	s.WaitFor(t, svc, dns.TypeA, Answer{Rcode: "NXDOMAIN"})
}

// coreDNSRules is the access CoreDNS's kubernetes plugin needs with
// multicluster on (docs/dns.md): its own ClusterRole's (less pods and
// endpoints, which it reads only with `pods verified` and never,
// respectively), plus ServiceImports.
var coreDNSRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{mcsv1beta1.GroupName}, Resources: []string{"serviceimports"}, Verbs: []string{"list", "watch"}},
}

// CoreDNS resolves clusterset.local names under a ServiceAccount with
// coreDNSRules alone, and each resource in them is needed.
func (f *fixture) rbac(t *testing.T) {
	c := f.c
	ctx := t.Context()
	const ns = "rbac"
	createNamespace(t, c, ns)
	createImport(t, c, clusterSetIPImport(ns, "echo"))
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "dnstest:coredns"}, Rules: coreDNSRules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: account.Namespace, Name: account.Name}},
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(account.Namespace).Create(ctx, account, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := tokenKubeconfig(t, c, account)

	s := StartKubeconfig(t, kubeconfig)
	s.WaitFor(t, "echo."+ns+".svc."+ClusterSetZone, dns.TypeA, Answer{"NOERROR", []string{"10.200.0.10"}})

	for i, rule := range coreDNSRules {
		for _, resource := range rule.Resources {
			t.Run("without "+resource, func(t *testing.T) {
				less := role.DeepCopy()
				less.Rules[i].Resources = slices.DeleteFunc(slices.Clone(rule.Resources), func(r string) bool { return r == resource })
				if len(less.Rules[i].Resources) == 0 {
					less.Rules = slices.Delete(less.Rules, i, i+1)
				}
				if _, err := c.Client.RbacV1().ClusterRoles().Update(ctx, less, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					current, err := c.Client.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
					if err == nil {
						current.Rules = coreDNSRules
						_, err = c.Client.RbacV1().ClusterRoles().Update(ctx, current, metav1.UpdateOptions{})
					}
					if err != nil {
						t.Errorf("restore ClusterRole %s: %v", role.Name, err)
					}
				})
				waitForbidden(ctx, t, c, "system:serviceaccount:kube-system:coredns", rule.APIGroups[0], resource)
				s := launch(t, kubeconfig)
				waitLog(t, s, regexp.MustCompile(fmt.Sprintf(`cannot (list|watch) resource \\?"%s\\?"`, resource)))
			})
		}
	}
}

// waitForbidden waits until the API server applies a role that lost a
// resource: until user may not list it (RBAC's authorizer follows roles
// through a watch).
func waitForbidden(ctx context.Context, t *testing.T, c *kubetest.Cluster, user, group, resource string) {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: group, Resource: resource},
	}}
	deadline := time.Now().Add(WaitTimeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s may still list %s %v after the role lost them", user, resource, WaitTimeout)
		}
		<-ticker.C
	}
}

func clusterSetIPImport(ns, name string) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:       mcsv1beta1.ClusterSetIP,
			IPs:        []string{"10.200.0.10", "fd00:200::10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []mcsv1beta1.ServicePort{
				{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 8080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
			},
		},
		Status: mcsv1beta1.ServiceImportStatus{Clusters: []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}},
	}
}

func createNamespace(t *testing.T, c *kubetest.Cluster, name string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// createImport creates imp as v1beta1, then its status (a subresource).
func createImport(t *testing.T, c *kubetest.Cluster, imp *mcsv1beta1.ServiceImport) {
	t.Helper()
	ctx := t.Context()
	imports := c.MCS.MulticlusterV1beta1().ServiceImports(imp.Namespace)
	created, err := imports.Create(ctx, imp, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ServiceImport %s/%s: %v", imp.Namespace, imp.Name, err)
	}
	created.Status = imp.Status
	if _, err := imports.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("ServiceImport %s/%s: update status: %v", imp.Namespace, imp.Name, err)
	}
}

type endpoint struct {
	ip       string
	hostname string
	ready    *bool
}

// createSlice creates an EndpointSlice as an MCS implementation does for a
// service imported from cluster: the MCS labels, and no
// kubernetes.io/service-name, which would make it the slice of a local
// Service.
func createSlice(t *testing.T, c *kubetest.Cluster, ns, service, cluster string, family discoveryv1.AddressType, endpoints []endpoint) {
	t.Helper()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      sliceName(service, cluster, family),
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName:   service,
				mcsv1beta1.LabelSourceCluster: cluster,
				discoveryv1.LabelManagedBy:    "meshfed.io",
			},
		},
		AddressType: family,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("sql"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](5432)},
		},
	}
	for _, e := range endpoints {
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			ep.Hostname = ptr.To(e.hostname)
		}
		slice.Endpoints = append(slice.Endpoints, ep)
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(t.Context(), slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create EndpointSlice %s/%s: %v", ns, slice.Name, err)
	}
}

func sliceName(service, cluster string, family discoveryv1.AddressType) string {
	return fmt.Sprintf("%s-%s-%s", service, cluster, map[discoveryv1.AddressType]string{
		discoveryv1.AddressTypeIPv4: "ipv4", discoveryv1.AddressTypeIPv6: "ipv6",
	}[family])
}

// updateSliceReady sets the Ready condition of the endpoint with address ip
// in the IPv4 slice of service from cluster.
func updateSliceReady(t *testing.T, c *kubetest.Cluster, ns, service, cluster, ip string, ready bool) {
	t.Helper()
	client := c.Client.DiscoveryV1().EndpointSlices(ns)
	slice, err := client.Get(t.Context(), sliceName(service, cluster, discoveryv1.AddressTypeIPv4), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range slice.Endpoints {
		if ep.Addresses[0] == ip {
			slice.Endpoints[i].Conditions.Ready = ptr.To(ready)
		}
	}
	if _, err := client.Update(t.Context(), slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// tokenKubeconfig writes a kubeconfig file with a token for account from
// the TokenRequest API, as the kubelet gets one for a pod.
func tokenKubeconfig(t *testing.T, c *kubetest.Cluster, account *corev1.ServiceAccount) string {
	t.Helper()
	tr, err := c.Client.CoreV1().ServiceAccounts(account.Namespace).CreateToken(t.Context(), account.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	kc.AuthInfos["coredns"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["coredns"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "coredns"}
	kc.CurrentContext = "coredns"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitLog waits until CoreDNS's output matches re.
func waitLog(t *testing.T, s *Server, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		data, err := os.ReadFile(s.proc.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if re.Match(data) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("coredns's output does not match %q within %v%s", re, WaitTimeout, s.logTail())
		}
		<-ticker.C
	}
}
