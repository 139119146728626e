//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/dnstest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke"
)

// The spoke's ServiceAccount as the chart names it.
const (
	spokeNamespace = "meshfed"
	spokeAccount   = "meshfed-spoke"
)

// chartClusterRole is the spoke chart's ClusterRole as the chart renders it
// (the charts' golden rendering, which their tests keep equal to the
// chart).
func chartClusterRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "charts", "testdata", "spoke.golden"))
	if err != nil {
		t.Fatal(err)
	}
	for doc := range bytes.SplitSeq(data, []byte("\n---\n")) {
		var cr rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &cr); err == nil && cr.Kind == "ClusterRole" {
			return &cr
		}
	}
	t.Fatal("the spoke chart's rendering has no ClusterRole")
	return nil
}

// asChartSpoke gives the chart's ServiceAccount the chart's ClusterRole in
// c and returns a kubeconfig that impersonates it: the spoke runs with
// exactly the chart's permissions.
func asChartSpoke(t *testing.T, c *kubetest.Cluster, role *rbacv1.ClusterRole) string {
	t.Helper()
	ctx := t.Context()
	role = role.DeepCopy()
	role.ResourceVersion = ""
	for _, err := range []error{
		func() error {
			_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spokeNamespace}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := c.Client.CoreV1().ServiceAccounts(spokeNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: spokeAccount}}, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		}(),
		func() error {
			_, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: role.Name},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: spokeNamespace, Name: spokeAccount}},
			}, metav1.CreateOptions{})
			return err
		}(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + spokeNamespace + ":" + spokeAccount
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + spokeNamespace, "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "spoke-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// mcsFleet is a clusterset of real API servers, each with a spoke running
// as the chart's ServiceAccount, and two hub replicas on fixed addresses
// (so that one can be restarted where the spokes look for it).
type mcsFleet struct {
	t        *testing.T
	clusters map[string]*kubetest.Cluster
	configs  map[string]string // cluster → the spoke's kubeconfig
	addrs    []string
	hubs     []*hubRun
	spokes   map[string]func()
}

func (f *mcsFleet) startHub(i int) {
	t := f.t
	t.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure, cfg.ID = true, fmt.Sprintf("hub-%d", i)
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = f.addrs[i], "", ""
	cfg.XDSWarmUp, cfg.XDSWarmUpQuiet = 3*time.Second, 200*time.Millisecond
	f.hubs[i] = runHub(t, cfg)
}

func (f *mcsFleet) startSpoke(id string) {
	t := f.t
	t.Helper()
	cfg := spoke.DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Kubeconfig, cfg.InCluster = id, "net1", f.configs[id], false
	cfg.Hub, cfg.Insecure = strings.Join(f.addrs, ","), true
	f.spokes[id] = runSpokeWith(t, cfg)
}

func startMCSFleet(t *testing.T, ids ...string) *mcsFleet {
	t.Helper()
	f := &mcsFleet{t: t, clusters: map[string]*kubetest.Cluster{}, configs: map[string]string{}, spokes: map[string]func(){}}
	role := chartClusterRole(t)
	for i, c := range kubetest.Start(t, len(ids)) {
		f.clusters[ids[i]] = c
		f.configs[ids[i]] = asChartSpoke(t, c, role)
	}
	f.addrs = []string{freeAddr(t), freeAddr(t)}
	f.hubs = make([]*hubRun, 2)
	f.startHub(0)
	f.startHub(1)
	for _, id := range ids {
		f.startSpoke(id)
	}
	return f
}

// export creates a Service, its EndpointSlice (one endpoint per address,
// hostnames <name>-0, <name>-1, ...) and its ServiceExport in c.
func export(t *testing.T, c *kubetest.Cluster, svc *corev1.Service, se *mcsv1alpha1.ServiceExport, addrs ...string) {
	t.Helper()
	ctx := t.Context()
	svc.Namespace = "demo"
	if _, err := c.Client.CoreV1().Services("demo").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(addrs) > 0 {
		var eps []discoveryv1.Endpoint
		for i, a := range addrs {
			eps = append(eps, discoveryv1.Endpoint{
				Addresses: []string{a}, Hostname: ptr.To(fmt.Sprintf("%s-%d", svc.Name, i)),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}, Zone: ptr.To("z1"),
			})
		}
		var ports []discoveryv1.EndpointPort
		for _, p := range svc.Spec.Ports {
			ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.TargetPort.IntVal), Protocol: ptr.To(corev1.ProtocolTCP)})
		}
		if _, err := c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: svc.Name + "-1", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: ports, Endpoints: eps,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if se == nil {
		se = &mcsv1alpha1.ServiceExport{}
	}
	se.Name, se.Namespace = svc.Name, "demo"
	if _, err := c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Create(ctx, se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func serviceImport(t *testing.T, c *kubetest.Cluster, name string) (*mcsv1beta1.ServiceImport, bool) {
	t.Helper()
	si, err := c.MCS.MulticlusterV1beta1().ServiceImports("demo").Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return si, true
}

// mcsSlices returns the MCS EndpointSlices of an import in c, by source
// cluster: the addresses of their endpoints, sorted.
func mcsSlices(t *testing.T, c *kubetest.Cluster, name string) map[string][]string {
	t.Helper()
	list, err := c.Client.DiscoveryV1().EndpointSlices("demo").List(t.Context(), metav1.ListOptions{
		LabelSelector: mcsv1beta1.LabelServiceName + "=" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		if _, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
			t.Fatalf("MCS EndpointSlice %s has %s: kube-proxy would route the local Service to it", s.Name, discoveryv1.LabelServiceName)
		}
		if m := s.Labels[discoveryv1.LabelManagedBy]; m == "" || m == "endpointslice-controller.k8s.io" {
			t.Fatalf("MCS EndpointSlice %s managed by %q", s.Name, m)
		}
		src := s.Labels[mcsv1beta1.LabelSourceCluster]
		for _, e := range s.Endpoints {
			out[src] = append(out[src], e.Addresses...)
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

func exportCondition(t *testing.T, c *kubetest.Cluster, name, typ string) metav1.Condition {
	t.Helper()
	se, err := c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(se.Status.Conditions, typ); cond != nil {
		return *cond
	}
	return metav1.Condition{}
}

func portsOf(si *mcsv1beta1.ServiceImport) []string {
	var out []string
	for _, p := range si.Spec.Ports {
		out = append(out, fmt.Sprintf("%s/%d/%s", p.Name, p.Port, p.Protocol))
	}
	slices.Sort(out)
	return out
}

func clustersOf(si *mcsv1beta1.ServiceImport) []string {
	var out []string
	for _, c := range si.Status.Clusters {
		out = append(out, c.Cluster)
	}
	slices.Sort(out)
	return out
}

// TestMCSAcrossRealClusters follows ServiceExports in three real API
// servers to the ServiceImports, EndpointSlices and ServiceExport
// conditions every spoke writes into its own cluster, as the chart's
// ServiceAccount, and to CoreDNS answering clusterset.local names.
func TestMCSAcrossRealClusters(t *testing.T) {
	f := startMCSFleet(t, "east", "west", "north")
	east, west, north := f.clusters["east"], f.clusters["west"], f.clusters["north"]
	createNamespace(t, east, "demo")
	createNamespace(t, west, "demo")

	// A ClusterSetIP service exported by east alone, with every property
	// an import copies.
	echo := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Labels: map[string]string{"own": "label"}},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")},
				{Name: "grpc", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
			},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}},
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:   ptr.To("PreferClose"),
		},
	}
	export(t, east, echo, &mcsv1alpha1.ServiceExport{Spec: mcsv1alpha1.ServiceExportSpec{
		ExportedLabels: map[string]string{"tier": "web"}, ExportedAnnotations: map[string]string{"owner": "team-a"},
	}}, "10.1.0.1", "10.1.0.2")

	var vip string
	t.Run("a single exporter's import in every cluster with the namespace", func(t *testing.T) {
		for name, c := range map[string]*kubetest.Cluster{"east": east, "west": west} {
			testwait.ForState(t, "echo imported into "+name, func() (bool, string) {
				si, ok := serviceImport(t, c, "echo")
				return ok && len(si.Spec.IPs) == 1 && slices.Equal(clustersOf(si), []string{"east"}), fmt.Sprintf("%+v", si)
			})
			si, _ := serviceImport(t, c, "echo")
			if vip == "" {
				vip = si.Spec.IPs[0]
			}
			ip := netip.MustParseAddr(si.Spec.IPs[0])
			if si.Spec.Type != mcsv1beta1.ClusterSetIP || si.Spec.IPs[0] != vip || !netip.MustParsePrefix("240.242.0.0/16").Contains(ip) ||
				!slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
				t.Errorf("%s: type %s, IPs %v (%v), want ClusterSetIP %s", name, si.Spec.Type, si.Spec.IPs, si.Spec.IPFamilies, vip)
			}
			if got, want := portsOf(si), []string{"grpc/9090/TCP", "http/80/TCP"}; !slices.Equal(got, want) {
				t.Errorf("%s: ports %v, want %v", name, got, want)
			}
			if si.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || si.Spec.SessionAffinityConfig == nil ||
				*si.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != 600 ||
				si.Spec.InternalTrafficPolicy == nil || *si.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal ||
				si.Spec.TrafficDistribution == nil || *si.Spec.TrafficDistribution != "PreferClose" {
				t.Errorf("%s: the import lost the export's properties: %+v", name, si.Spec)
			}
			if si.Labels["tier"] != "web" || si.Annotations["owner"] != "team-a" || si.Labels["own"] != "" {
				t.Errorf("%s: labels %v annotations %v, want the exported ones and never the Service's own", name, si.Labels, si.Annotations)
			}
			testwait.ForState(t, "echo's EndpointSlices in "+name, func() (bool, string) {
				got := mcsSlices(t, c, "echo")
				return len(got) == 1 && slices.Equal(got["east"], []string{"10.1.0.1", "10.1.0.2"}), fmt.Sprint(got)
			})
		}
		// North has no namespace demo: nothing is written there, and it
		// does not hold east's export back.
		if _, ok := serviceImport(t, north, "echo"); ok {
			t.Error("an import in north, which has no namespace demo")
		}
		testwait.ForState(t, "east's export Valid, without conflict, Ready", func() (bool, string) {
			v, c, r := exportCondition(t, east, "echo", "Valid"), exportCondition(t, east, "echo", "Conflict"), exportCondition(t, east, "echo", "Ready")
			return v.Status == metav1.ConditionTrue && c.Status == metav1.ConditionFalse && c.Reason == "NoConflicts" && r.Status == metav1.ConditionTrue,
				fmt.Sprintf("%+v %+v %+v", v, c, r)
		})
		// The namespace appears in north: the import follows.
		createNamespace(t, north, "demo")
		testwait.ForState(t, "echo imported into north", func() (bool, string) {
			si, ok := serviceImport(t, north, "echo")
			return ok && len(si.Spec.IPs) == 1 && si.Spec.IPs[0] == vip, fmt.Sprintf("%+v", si)
		})
	})

	t.Run("a dual-stack import gets a ClusterSetIP per family", func(t *testing.T) {
		export(t, east, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dual"}, Spec: corev1.ServiceSpec{
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack), IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}},
		}}, nil)
		testwait.ForState(t, "dual imported into west", func() (bool, string) {
			si, ok := serviceImport(t, west, "dual")
			return ok && len(si.Spec.IPs) == 2, fmt.Sprintf("%+v", si)
		})
		si, _ := serviceImport(t, west, "dual")
		v6, v4 := netip.MustParseAddr(si.Spec.IPs[0]), netip.MustParseAddr(si.Spec.IPs[1])
		if !slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}) ||
			!netip.MustParsePrefix("fd6d:6673:6574::/64").Contains(v6) || !netip.MustParsePrefix("240.242.0.0/16").Contains(v4) {
			t.Errorf("dual's IPs %v families %v, want IPv6 then IPv4 from the default pools", si.Spec.IPs, si.Spec.IPFamilies)
		}
	})

	t.Run("every replica hands out the same ClusterSetIP", func(t *testing.T) {
		for _, h := range f.hubs {
			s := h.Registry().Current()
			_, ok := s.Service("demo/echo")
			if ips := s.Import("demo/echo").ClustersetIPs; !ok || len(ips) != 1 || ips[0].String() != vip {
				t.Errorf("%s: echo's ClusterSetIPs %v, want %s", h.FederationAddr(), ips, vip)
			}
		}
	})

	t.Run("headless import and DNS", func(t *testing.T) {
		db := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{
				{Name: "sql", Port: 5432, TargetPort: intstr.FromInt32(5432), Protocol: corev1.ProtocolTCP},
			}},
		}
		export(t, east, db, nil, "10.1.0.11", "10.1.0.12")
		testwait.ForState(t, "db imported into west", func() (bool, string) {
			si, ok := serviceImport(t, west, "db")
			return ok && si.Spec.Type == mcsv1beta1.Headless && len(si.Spec.IPs) == 0 && len(mcsSlices(t, west, "db")["east"]) == 2, fmt.Sprintf("%+v", si)
		})
		d := dnstest.Start(t, west)
		d.WaitFor(t, "echo.demo.svc.clusterset.local.", dns.TypeA, dnstest.Answer{Rcode: "NOERROR", Records: []string{vip}})
		d.WaitFor(t, "db.demo.svc.clusterset.local.", dns.TypeA, dnstest.Answer{Rcode: "NOERROR", Records: []string{"10.1.0.11", "10.1.0.12"}})
		d.WaitFor(t, "db-1.east.db.demo.svc.clusterset.local.", dns.TypeA, dnstest.Answer{Rcode: "NOERROR", Records: []string{"10.1.0.12"}})
	})

	t.Run("ExternalName is not exported", func(t *testing.T) {
		export(t, east, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}, nil)
		testwait.ForState(t, "ext's export Valid=False", func() (bool, string) {
			v := exportCondition(t, east, "ext", "Valid")
			return v.Status == metav1.ConditionFalse && v.Reason == string(mcsv1alpha1.ServiceExportReasonInvalidServiceType), fmt.Sprintf("%+v", v)
		})
		for _, c := range []*kubetest.Cluster{east, west, north} {
			if _, ok := serviceImport(t, c, "ext"); ok {
				t.Error("ExternalName ext was imported")
			}
		}
	})

	t.Run("two exporters: ports union, conflicts won by the oldest on every export", func(t *testing.T) {
		// West exports echo later (so younger), with a port of its own, a
		// port of the same name and another number, and other labels.
		westEcho := echo.DeepCopy()
		westEcho.ResourceVersion = ""
		westEcho.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")},
			{Name: "grpc", Port: 9091, TargetPort: intstr.FromInt32(9091), Protocol: corev1.ProtocolTCP},
			{Name: "metrics", Port: 9100, TargetPort: intstr.FromInt32(9100), Protocol: corev1.ProtocolTCP},
		}
		export(t, west, westEcho, &mcsv1alpha1.ServiceExport{Spec: mcsv1alpha1.ServiceExportSpec{
			ExportedLabels: map[string]string{"tier": "backend"}, ExportedAnnotations: map[string]string{"owner": "team-a"},
		}}, "10.2.0.1")
		// And db as a ClusterIP service: east's older headless export wins.
		export(t, west, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "sql", Port: 5432, TargetPort: intstr.FromInt32(5432), Protocol: corev1.ProtocolTCP},
		}}}, nil, "10.2.0.11")

		for name, c := range map[string]*kubetest.Cluster{"east": east, "west": west, "north": north} {
			testwait.ForState(t, "echo from both clusters in "+name, func() (bool, string) {
				si, ok := serviceImport(t, c, "echo")
				if !ok {
					return false, "no import"
				}
				got := mcsSlices(t, c, "echo")
				return slices.Equal(clustersOf(si), []string{"east", "west"}) && len(got["west"]) == 1 && len(got["east"]) == 2,
					fmt.Sprintf("clusters %v slices %v", clustersOf(si), got)
			})
			si, _ := serviceImport(t, c, "echo")
			if got, want := portsOf(si), []string{"grpc/9090/TCP", "http/80/TCP", "metrics/9100/TCP"}; !slices.Equal(got, want) {
				t.Errorf("%s: ports %v, want the union with east's grpc (the oldest) %v", name, got, want)
			}
			if si.Labels["tier"] != "web" || len(si.Spec.IPs) != 1 || si.Spec.IPs[0] != vip {
				t.Errorf("%s: labels %v IPs %v: the oldest export's labels and the same IP", name, si.Labels, si.Spec.IPs)
			}
			if db, ok := serviceImport(t, c, "db"); !ok || db.Spec.Type != mcsv1beta1.Headless {
				t.Errorf("%s: db %+v, want east's (oldest) headless type", name, db)
			}
		}
		for name, c := range map[string]*kubetest.Cluster{"east": east, "west": west} {
			testwait.ForState(t, name+"'s exports in conflict", func() (bool, string) {
				e, d := exportCondition(t, c, "echo", "Conflict"), exportCondition(t, c, "db", "Conflict")
				return e.Status == metav1.ConditionTrue && (e.Reason == "LabelsConflict" || e.Reason == "PortConflict") &&
						strings.Contains(e.Message, "west") && d.Status == metav1.ConditionTrue && d.Reason == "TypeConflict",
					fmt.Sprintf("echo %+v db %+v", e, d)
			})
		}
	})

	t.Run("port sets that only add to each other: the union, and a conflict on each export", func(t *testing.T) {
		// The MCS conformance suite's case: the second export has the
		// first's port and an SCTP one.
		tcp := corev1.ServicePort{Name: "tcp", Port: 42, TargetPort: intstr.FromInt32(42), Protocol: corev1.ProtocolTCP}
		export(t, east, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{tcp}}}, nil)
		testwait.ForState(t, "hello imported into west", func() (bool, string) {
			_, ok := serviceImport(t, west, "hello")
			return ok, ""
		})
		export(t, west, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			tcp, {Name: "stcp", Port: 142, TargetPort: intstr.FromInt32(142), Protocol: corev1.ProtocolSCTP},
		}}}, nil)
		for name, c := range map[string]*kubetest.Cluster{"east": east, "west": west} {
			testwait.ForState(t, name+"'s hello: both ports, and a conflict", func() (bool, string) {
				si, ok := serviceImport(t, c, "hello")
				cond := exportCondition(t, c, "hello", "Conflict")
				return ok && slices.Equal(portsOf(si), []string{"stcp/142/SCTP", "tcp/42/TCP"}) &&
						cond.Status == metav1.ConditionTrue && cond.Reason == "PortConflict",
					fmt.Sprintf("import %+v, condition %+v", si, cond)
			})
		}
	})

	t.Run("a spoke restart writes nothing and removes nothing", func(t *testing.T) {
		before := meshfedObjects(t, west)
		f.spokes["west"]()
		f.startSpoke("west")
		// The restarted spoke has reported to the hubs what west holds.
		testwait.ForState(t, "west's new spoke synced", func() (bool, string) {
			for _, h := range f.hubs {
				for _, st := range h.Registry().Status() {
					if st.ID == "west" && (!st.Connected || st.ShardVersion == 0) {
						return false, fmt.Sprintf("%+v", st)
					}
				}
			}
			return true, ""
		})
		// A new import reaches west: the new spoke has taken a set and
		// reconciled the cluster with it.
		export(t, east, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "marker"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP},
		}}}, nil, "10.1.0.99")
		testwait.ForState(t, "marker imported into west", func() (bool, string) {
			_, ok := serviceImport(t, west, "marker")
			return ok && len(mcsSlices(t, west, "marker")["east"]) == 1, ""
		})
		after := meshfedObjects(t, west)
		for k := range after {
			if strings.Contains(k, "marker") {
				delete(after, k)
			}
		}
		if !mapsEqual(before, after) {
			t.Errorf("west's objects changed across its spoke's restart:\nbefore %v\nafter  %v", before, after)
		}
	})

	t.Run("ClusterSetIPs survive a hub restart", func(t *testing.T) {
		f.hubs[0].stop()
		f.startHub(0)
		testwait.ForState(t, "the restarted replica's echo", func() (bool, string) {
			s := f.hubs[0].Registry().Current()
			v, ok := s.Service("demo/echo")
			ips := s.Import("demo/echo").ClustersetIPs
			return ok && len(v.Clusters) == 2 && len(ips) == 1 && ips[0].String() == vip, fmt.Sprintf("%+v %v", v, ips)
		})
	})

	t.Run("the import goes after its last export", func(t *testing.T) {
		if err := east.MCS.MulticlusterV1alpha1().ServiceExports("demo").Delete(t.Context(), "echo", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testwait.ForState(t, "echo from west alone", func() (bool, string) {
			si, ok := serviceImport(t, north, "echo")
			got := mcsSlices(t, north, "echo")
			return ok && slices.Equal(clustersOf(si), []string{"west"}) && len(got["east"]) == 0 && si.Spec.IPs[0] == vip, fmt.Sprintf("%+v %v", si, got)
		})
		if err := west.MCS.MulticlusterV1alpha1().ServiceExports("demo").Delete(t.Context(), "echo", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*kubetest.Cluster{"east": east, "west": west, "north": north} {
			testwait.ForState(t, "echo gone from "+name, func() (bool, string) {
				_, ok := serviceImport(t, c, "echo")
				got := mcsSlices(t, c, "echo")
				return !ok && len(got) == 0, fmt.Sprint(got)
			})
		}
		// And a headless import, once neither cluster exports db.
		for _, c := range []*kubetest.Cluster{east, west} {
			if err := c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Delete(t.Context(), "db", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for name, c := range map[string]*kubetest.Cluster{"east": east, "west": west, "north": north} {
			testwait.ForState(t, "db gone from "+name, func() (bool, string) {
				_, ok := serviceImport(t, c, "db")
				got := mcsSlices(t, c, "db")
				return !ok && len(got) == 0, fmt.Sprint(got)
			})
		}
	})
}

// meshfedObjects returns the resource versions of the ServiceImports and
// MCS EndpointSlices in c's namespace demo.
func meshfedObjects(t *testing.T, c *kubetest.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	sis, err := c.MCS.MulticlusterV1beta1().ServiceImports("demo").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range sis.Items {
		out["ServiceImport/"+si.Name] = si.ResourceVersion
	}
	eps, err := c.Client.DiscoveryV1().EndpointSlices("demo").List(t.Context(), metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range eps.Items {
		out["EndpointSlice/"+s.Name] = s.ResourceVersion
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
