package charts_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"
)

// spokeRules is every permission the spoke may have: what spoke/source/kube
// lists and watches, and what spoke/writeback writes: the ServiceExport
// status, the Events of the objects the spoke rejects, and the imports
// (ServiceImports, their status, the MCS EndpointSlices); and the two
// well-known About API properties it reads at start.
var spokeRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services", "pods", "nodes", "namespaces"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceexports"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceexports/status"}, Verbs: []string{"update"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports/status"}, Verbs: []string{"update"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	{
		APIGroups: []string{"about.k8s.io"}, Resources: []string{"clusterproperties"},
		ResourceNames: []string{"cluster.clusterset.k8s.io", "clusterset.k8s.io"}, Verbs: []string{"get"},
	},
}

func checkSpokeHubList(t *testing.T, r rendered) {
	t.Helper()
	c := r.deployments[0].Spec.Template.Spec.Containers[0]
	checkFlags(t, spokeFlags(t, c.Args), map[string]string{
		"hub": "hub-a.example.com:9443,hub-b.example.com:9443", "gateway-namespaces": "istio-system,gateways",
	})
	checkCertificate(t, r, "meshfed-spoke-tls", "spiffe://cluster.local/meshfed/cluster/east", "client auth")
	if len(r.netpols) != 1 || len(r.netpols[0].Spec.Ingress) != 0 || !slices.Equal(r.netpols[0].Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("spoke NetworkPolicies %+v; want one admitting no ingress", r.netpols)
	}
	var crds []string
	for _, c := range r.crds {
		crds = append(crds, c.Name)
		if c.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s would be deleted on uninstall, and every object of it with it", c.Name)
		}
	}
	if want := []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io"}; !slices.Equal(crds, want) {
		t.Errorf("CRDs %v, want %v", crds, want)
	}
}

// TestMCSCRDsAreTheModules: the spoke chart installs the MCS CRDs the
// spoke is built and tested against, byte for byte.
func TestMCSCRDsAreTheModules(t *testing.T) {
	for _, name := range []string{"multicluster.x-k8s.io_serviceexports.yaml", "multicluster.x-k8s.io_serviceimports.yaml"} {
		chart, err := os.ReadFile(filepath.Join("meshfed-spoke", "files", name))
		if err != nil {
			t.Fatal(err)
		}
		tested, err := os.ReadFile(filepath.Join("..", "internal", "kubetest", "crds", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(chart, tested) {
			t.Errorf("charts/meshfed-spoke/files/%s differs from internal/kubetest/crds/%s: copy it again", name, name)
		}
	}
}

func checkSpoke(t *testing.T, r rendered) {
	t.Helper()
	if len(r.clusterRoles) != 1 || len(r.bindings) != 1 || len(r.accounts) != 1 {
		t.Fatalf("got %d ClusterRoles, %d ClusterRoleBindings and %d ServiceAccounts, want one each",
			len(r.clusterRoles), len(r.bindings), len(r.accounts))
	}
	role, binding, sa := r.clusterRoles[0], r.bindings[0], r.accounts[0]
	if diff := cmp.Diff(spokeRules, role.Rules); diff != "" {
		t.Errorf("spoke ClusterRole rules (-want +got):\n%s", diff)
	}
	checkBinding(t, r, "ClusterRole", role.Name, binding.Name, binding.RoleRef, binding.Subjects, sa)

	d := r.deployments[0]
	pod := d.Spec.Template.Spec
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %d, strategy %s: want exactly one spoke, also during upgrades", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	if pod.ServiceAccountName != sa.Name || isFalse(pod.AutomountServiceAccountToken) {
		t.Errorf("the spoke does not run with its ServiceAccount's token")
	}
	if len(r.services) != 0 {
		t.Errorf("the spoke only dials out; got a Service")
	}
	c := pod.Containers[0]
	checkPorts(t, c.Ports, map[string]int32{"debug": 8080})
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "debug" {
			t.Errorf("probe %+v, want GET %s on the debug port", probe, path)
		}
	}
	checkFlags(t, spokeFlags(t, c.Args), map[string]string{
		"debug-addr":   ":8080",
		"cluster-id":   "east",
		"network":      "network-east",
		"hub":          "hub.example.com:9443",
		"tls-cert":     tlsDir + "/tls.crt",
		"tls-key":      tlsDir + "/tls.key",
		"tls-ca":       tlsDir + "/ca.crt",
		"export":       "exported",
		"leader-elect": "false",
	})
	if len(r.roles)+len(r.roleBindings) != 0 {
		t.Errorf("%d Roles and %d RoleBindings for a lone spoke, which elects no leader", len(r.roles), len(r.roleBindings))
	}
}

// checkBinding asserts that the role of kind (ClusterRole or Role) and its
// binding come from templates/clusterrole.yaml, where every grant of the
// spoke is, and that the binding gives that role to the ServiceAccount sa
// alone.
func checkBinding(t *testing.T, r rendered, kind, role, binding string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, sa corev1.ServiceAccount) {
	t.Helper()
	for _, key := range []string{kind + "/" + role, kind + "Binding/" + binding} {
		if src := r.sources[key]; src != "meshfed-spoke/templates/clusterrole.yaml" {
			t.Errorf("%s comes from %q, want templates/clusterrole.yaml", key, src)
		}
	}
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role}
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: namespace}}
	if diff := cmp.Diff(wantRef, ref); diff != "" {
		t.Errorf("%sBinding roleRef (-want +got):\n%s", kind, diff)
	}
	if diff := cmp.Diff(wantSubjects, subjects); diff != "" {
		t.Errorf("%sBinding subjects (-want +got):\n%s", kind, diff)
	}
}

// spokeLeaseRules is every permission on the leader election's Lease,
// granted in the release's namespace alone: create it, read and renew it
// by name (create cannot be restricted to a name).
func spokeLeaseRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{name}, Verbs: []string{"get", "update"}},
	}
}

// checkLeaderElection asserts a spoke rendering whose pods elect a leader:
// the flags, with the Lease named after the release in its namespace and
// lease timings, and the Role and RoleBinding that grant the Lease alone.
// The ClusterRole is the lone spoke's.
func checkLeaderElection(t *testing.T, r rendered, template corev1.PodTemplateSpec, durations [3]string) {
	t.Helper()
	checkFlags(t, spokeFlags(t, template.Spec.Containers[0].Args), map[string]string{
		"leader-elect": "true", "leader-elect-lease-name": "meshfed-spoke", "leader-elect-namespace": namespace,
		"leader-elect-lease-duration": durations[0], "leader-elect-renew-deadline": durations[1], "leader-elect-retry-period": durations[2],
	})
	if len(r.roles) != 1 || len(r.roleBindings) != 1 || len(r.accounts) != 1 || len(r.clusterRoles) != 1 {
		t.Fatalf("got %d Roles, %d RoleBindings, %d ServiceAccounts and %d ClusterRoles, want one each",
			len(r.roles), len(r.roleBindings), len(r.accounts), len(r.clusterRoles))
	}
	if diff := cmp.Diff(spokeRules, r.clusterRoles[0].Rules); diff != "" {
		t.Errorf("spoke ClusterRole rules with leader election (-want +got):\n%s", diff)
	}
	role, binding, sa := r.roles[0], r.roleBindings[0], r.accounts[0]
	if role.Namespace != namespace || binding.Namespace != namespace {
		t.Errorf("Role in %q, RoleBinding in %q; want both in the release's namespace %q", role.Namespace, binding.Namespace, namespace)
	}
	if diff := cmp.Diff(spokeLeaseRules("meshfed-spoke"), role.Rules); diff != "" {
		t.Errorf("spoke Role rules (-want +got):\n%s", diff)
	}
	checkBinding(t, r, "Role", role.Name, binding.Name, binding.RoleRef, binding.Subjects, sa)
	if template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("the pods run as %q, not the ServiceAccount the Role is bound to", template.Spec.ServiceAccountName)
	}
}

// checkSpokeDaemonSet: a spoke on the nodes that nodeSelector and
// tolerations admit, rolled one node at a time, electing a leader.
func checkSpokeDaemonSet(t *testing.T, r rendered) {
	t.Helper()
	if len(r.deployments) != 0 || len(r.daemonSets) != 1 {
		t.Fatalf("got %d Deployments and %d DaemonSets, want a DaemonSet alone", len(r.deployments), len(r.daemonSets))
	}
	ds := r.daemonSets[0]
	pod := ds.Spec.Template.Spec
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("update strategy %+v, want a rolling update", ds.Spec.UpdateStrategy)
	}
	if pod.NodeSelector["node-role.kubernetes.io/infra"] != "" || len(pod.NodeSelector) != 1 ||
		len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "node-role.kubernetes.io/infra" {
		t.Errorf("nodeSelector %v, tolerations %+v; want the values' infra nodes", pod.NodeSelector, pod.Tolerations)
	}
	checkLeaderElection(t, r, ds.Spec.Template, [3]string{"15s", "10s", "2s"})
}

// checkSpokeReplicas: a Deployment of two spokes electing a leader, rolled
// a pod at a time with none missing (the new pod is ready as a standby
// before an old one goes), with the values' lease timings.
func checkSpokeReplicas(t *testing.T, r rendered) {
	t.Helper()
	name, _, template := r.workload(t)
	d := r.deployments[0]
	st := d.Spec.Strategy
	if *d.Spec.Replicas != 2 || st.Type != appsv1.RollingUpdateDeploymentStrategyType || st.RollingUpdate == nil ||
		st.RollingUpdate.MaxSurge.IntValue() != 1 || st.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("Deployment %s: replicas %d, strategy %+v; want 2, rolling with maxSurge 1, maxUnavailable 0", name, *d.Spec.Replicas, st)
	}
	checkLeaderElection(t, r, template, [3]string{"30s", "20s", "4s"})
}

// checkSpokeMCP: the spoke serves istiod on the MCP port, behind a Service
// of its own, which the NetworkPolicy opens to istio-system alone.
func checkSpokeMCP(t *testing.T, r rendered) {
	t.Helper()
	_, _, template := r.workload(t)
	c := template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--mcp-addr=:15011") || !slices.Contains(c.Args, "--mcp-initial-wait=30s") {
		t.Errorf("args %v, want --mcp-addr=:15011 and --mcp-initial-wait=30s", c.Args)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "grpc-mcp" && p.ContainerPort == 15011 }) {
		t.Errorf("container ports %v lack grpc-mcp 15011", c.Ports)
	}
	checkPortService(t, r, template, "meshfed-spoke-mcp", 15011, "grpc-mcp")
	if len(r.netpols) != 1 || len(r.netpols[0].Spec.Ingress) != 1 ||
		r.netpols[0].Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "istio-system" {
		t.Errorf("NetworkPolicy %+v, want the MCP port open to istio-system", r.netpols)
	}
}

// checkSpokeRemoteViews: the views on their port and Service, over the
// Secrets' certificate and token (flags a real spoke accepts), the remote
// secrets written in istiod's namespace for that Service, a Role there for
// Secrets alone, and the NetworkPolicy open to istiod's namespace.
func checkSpokeRemoteViews(t *testing.T, r rendered) {
	t.Helper()
	_, _, template := r.workload(t)
	c := template.Spec.Containers[0]
	checkFlags(t, spokeFlags(t, c.Args), map[string]string{
		"remote-views-addr":             ":15012",
		"remote-views-tls-cert":         "/etc/meshfed/views-tls/tls.crt",
		"remote-views-tls-key":          "/etc/meshfed/views-tls/tls.key",
		"remote-views-token-file":       "/etc/meshfed/views-token/token",
		"remote-views-url":              "https://meshfed-spoke-views.meshfed.svc:15012",
		"remote-views-ca-file":          "/etc/meshfed/views-tls/ca.crt",
		"remote-views-secret-namespace": "istio-system",
		"remote-views-secret-prefix":    "meshfed-remote-",
		"remote-views-secret-owner":     "meshfed-spoke-remote-secrets",
	})
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "https-views" && p.ContainerPort == 15012 }) {
		t.Errorf("container ports %v lack https-views 15012", c.Ports)
	}
	for vol, secret := range map[string]string{"views-tls": "meshfed-spoke-views-tls", "views-token": "meshfed-spoke-views-token"} {
		if !slices.ContainsFunc(template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol && v.Secret != nil && v.Secret.SecretName == secret }) {
			t.Errorf("no volume %s from the Secret %s: %+v", vol, secret, template.Spec.Volumes)
		}
	}
	checkPortService(t, r, template, "meshfed-spoke-views", 15012, "https-views")
	if len(r.roles) != 1 || r.roles[0].Namespace != "istio-system" || len(r.roles[0].Rules) != 2 ||
		!slices.Equal(r.roles[0].Rules[0].Resources, []string{"secrets"}) ||
		!slices.Equal(r.roles[0].Rules[1].ResourceNames, []string{"meshfed-spoke-remote-secrets"}) {
		t.Errorf("roles %+v, want one in istio-system for Secrets and their owner alone", r.roles)
	}
	if len(r.roleBindings) != 1 || r.roleBindings[0].Namespace != "istio-system" || r.roleBindings[0].Subjects[0].Namespace != "meshfed" {
		t.Errorf("role bindings %+v", r.roleBindings)
	}
	if len(r.netpols) != 1 || len(r.netpols[0].Spec.Ingress) != 1 ||
		r.netpols[0].Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "istio-system" {
		t.Errorf("NetworkPolicy %+v, want the views' port open to istio-system", r.netpols)
	}
}

// clusterProperty is an About API ClusterProperty.
type clusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Value string `json:"value"`
	} `json:"spec"`
}

// checkSpokeAbout: the chart installs the About API's CRD, as the spoke's
// tests install it, and creates the cluster's two well-known properties,
// each kept on uninstall; the spoke may get exactly those.
func checkSpokeAbout(t *testing.T, r rendered) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("..", "internal", "kubetest", "aboutcrds", "about.k8s.io_clusterproperties.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("meshfed-spoke", "files", "about.k8s.io_clusterproperties.yaml"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("the chart's ClusterProperty CRD differs from internal/kubetest's (%v): copy it", err)
	}
	if len(r.crds) != 1 || r.crds[0].Name != "clusterproperties.about.k8s.io" || r.crds[0].Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("CRDs %v, want the ClusterProperty CRD, kept", r.crds)
	}
	props := map[string]string{}
	for _, p := range r.clusterProperties {
		props[p.Name] = p.Spec.Value
		if p.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("ClusterProperty %s is not kept on uninstall", p.Name)
		}
	}
	if len(props) != 2 || props["cluster.clusterset.k8s.io"] != "east" || props["clusterset.k8s.io"] != "prod" {
		t.Errorf("ClusterProperties %v, want cluster.clusterset.k8s.io=east and clusterset.k8s.io=prod", props)
	}
	granted := false
	for _, g := range rbacGrants(r.clusterRoles[0].Rules) {
		if g.resource == "clusterproperties" {
			granted = granted || g.verb == "get" && (g.name == "cluster.clusterset.k8s.io" || g.name == "clusterset.k8s.io")
			if g.verb != "get" || g.name == "" {
				t.Errorf("the ClusterRole grants %s: more than getting the two properties", g)
			}
		}
	}
	if !granted {
		t.Error("the ClusterRole grants no get on the About API's properties")
	}
}

// checkPortService asserts the Service name: port to the pods' named
// port target, selecting the pods of template.
func checkPortService(t *testing.T, r rendered, template corev1.PodTemplateSpec, name string, port int32, target string) {
	t.Helper()
	i := slices.IndexFunc(r.services, func(s corev1.Service) bool { return s.Name == name })
	if i < 0 || r.services[i].Spec.Ports[0].Port != port || r.services[i].Spec.Ports[0].TargetPort.StrVal != target {
		t.Fatalf("Service %s, port %d to %s: %+v", name, port, target, r.services)
	}
	for k, v := range r.services[i].Spec.Selector {
		if template.Labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the pods do not carry", name, k, v)
		}
	}
}
