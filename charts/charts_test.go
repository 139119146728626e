// Package charts_test lints and renders the Helm charts with the helm pinned
// in tools/go.mod, compares the output with golden files and checks
// invariants of the rendered objects.
//
// Refresh the golden files with: go test ./charts -update
package charts_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/policy"
	"github.com/meshfed/meshfed/spoke"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the rendered charts")

const (
	namespace = "meshfed"
	// image.repository and the charts' appVersion, per chart.
	hubImage, spokeImage = "meshfed/meshfed-hub:0.1.0", "meshfed/meshfed-spoke:0.1.0"
	tlsDir               = "/etc/meshfed/tls"
)

type renderCase struct {
	name    string // testdata/<name>.values.yaml, testdata/<name>.golden
	chart   string // directory under charts/, also the release name
	wantErr string // when set, helm template must fail with this in its error
	check   func(t *testing.T, r rendered)
}

func TestCharts(t *testing.T) {
	h := newHelm(t)
	cases := []renderCase{
		{name: "hub-defaults", chart: "meshfed-hub", check: checkHubDefaults},
		{name: "hub-ha-xds", chart: "meshfed-hub", check: checkHubHAXDS},
		{name: "hub-single", chart: "meshfed-hub", check: checkHubSingle},
		{name: "hub-user-affinity", chart: "meshfed-hub", check: checkHubUserAffinity},
		{name: "hub-podmonitor", chart: "meshfed-hub", check: checkPodMonitor},
		{name: "hub-monitoring", chart: "meshfed-hub", check: checkHubMonitoring},
		{name: "hub-services", chart: "meshfed-hub", check: checkHubServicesOptions},
		{name: "spoke-podmonitor", chart: "meshfed-spoke", check: checkPodMonitor},
		{name: "hub-loopback-debug", chart: "meshfed-hub", wantErr: `debug.host "127.0.0.1" is loopback-only`},
		{name: "hub-xds-no-tls", chart: "meshfed-hub", wantErr: "xds.enabled needs xds.tls.secretName"},
		{name: "hub-bad-anti-affinity", chart: "meshfed-hub", wantErr: `at '/podAntiAffinity': value must be one of 'soft', 'hard', 'none'`},
		{name: "hub-bad-replicas", chart: "meshfed-hub", wantErr: `at '/replicaCount': got string, want integer`},
		{name: "hub-bad-unknown-key", chart: "meshfed-hub", wantErr: `at '/xds': additional properties 'enable' not allowed`},
		{name: "hub-bad-cert-manager", chart: "meshfed-hub", wantErr: `at '/certManager/issuerRef/name': minLength: got 0, want 1`},
		{name: "hub-bad-log-level", chart: "meshfed-hub", wantErr: `at '/log/level': value must be one of 'debug', 'info', 'warn', 'error'`},
		{name: "spoke-bad-gateway-namespace", chart: "meshfed-spoke", wantErr: `at '/gatewayNamespaces/0'`},
		{name: "spoke-bad-export", chart: "meshfed-spoke", wantErr: `at '/export': value must be one of 'exported', 'all'`},
		{name: "spoke-bad-kind", chart: "meshfed-spoke", wantErr: `at '/kind': value must be one of 'Deployment', 'DaemonSet'`},
		{name: "spoke-daemonset", chart: "meshfed-spoke", check: checkSpokeDaemonSet},
		{name: "spoke-replicas", chart: "meshfed-spoke", check: checkSpokeReplicas},
		{name: "spoke", chart: "meshfed-spoke", check: checkSpoke},
		{name: "spoke-hub-list", chart: "meshfed-spoke", check: checkSpokeHubList},
		{name: "spoke-mcp", chart: "meshfed-spoke", check: checkSpokeMCP},
		{name: "spoke-bad-mcp-replicas", chart: "meshfed-spoke", wantErr: "mcp.enabled needs a single spoke pod"},
		{
			name: "spoke-bad-hub-list", chart: "meshfed-spoke",
			wantErr: `"hub-b.example.com" is not host:port`,
		},
		{
			name: "spoke-missing-cluster-id", chart: "meshfed-spoke",
			wantErr: "clusterID is required: set it to this cluster's ID",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			values := filepath.Join("testdata", c.name+".values.yaml")
			if c.wantErr == "" {
				// --strict fails on lint warnings too.
				if out, err := h.run(t, "lint", "--strict", "--namespace", namespace, "--values", values, c.chart); err != nil {
					t.Fatalf("helm lint --strict %s: %v\n%s", c.chart, err, out)
				}
			}
			out, err := h.run(t, "template", c.chart, c.chart, "--namespace", namespace, "--values", values)
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("helm template succeeded; want an error containing %q", c.wantErr)
				}
				if !strings.Contains(out, c.wantErr) {
					t.Fatalf("helm template failed with\n%s\nwant an error containing %q", out, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			compareGolden(t, filepath.Join("testdata", c.name+".golden"), out)
			r := parse(t, out)
			checkCommon(t, r)
			c.check(t, r)
		})
	}
}

// helm runs the helm binary that tools/go.mod pins.
type helm struct {
	path, dir string
	env       []string
}

// newHelm builds helm through `go tool` (the build cache keeps the binary, so
// only the first run after a change of tools/go.mod builds it) and returns a
// runner that calls it directly from charts/, with its state in a temporary
// directory.
func newHelm(t *testing.T) helm {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	modfile := filepath.Join(root, "tools", "go.mod")
	if _, err := os.Stat(modfile); err != nil {
		t.Fatalf("tools/go.mod not found from the test's directory: %v", err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds helm: %v", err)
	}
	// -n prints the cached executable's path instead of running it, after
	// building it when needed.
	cmd := exec.CommandContext(t.Context(), gobin, "tool", "-modfile="+modfile, "-n", "helm")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool -modfile=tools/go.mod -n helm: %v\n%s", err, stderr.Bytes())
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("go tool -n helm printed %q: %v", path, err)
	}

	home := t.TempDir()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "HELM_") })
	env = append(env,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	return helm{path: path, dir: filepath.Join(root, "charts"), env: env}
}

// run returns helm's stdout, followed by its stderr when it fails.
func (h helm) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), h.path, args...)
	cmd.Dir, cmd.Env = h.dir, h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is missing: run go test ./charts -update", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")); diff != "" {
		t.Errorf("rendered chart differs from %s (-want +got); if the change is intended, run go test ./charts -update:\n%s", path, diff)
	}
}

// rendered holds a chart's objects, decoded strictly into the Kubernetes API
// types (an unknown or misspelled field fails the test).
type rendered struct {
	deployments  []appsv1.Deployment
	daemonSets   []appsv1.DaemonSet
	services     []corev1.Service
	accounts     []corev1.ServiceAccount
	pdbs         []policyv1.PodDisruptionBudget
	clusterRoles []rbacv1.ClusterRole
	bindings     []rbacv1.ClusterRoleBinding
	roles        []rbacv1.Role
	roleBindings []rbacv1.RoleBinding
	configMaps   []corev1.ConfigMap
	certificates []certificate
	crds         []apiextensionsv1.CustomResourceDefinition
	netpols      []networkingv1.NetworkPolicy
	podMonitors  []podMonitor
	// prometheusRules are the hub's alerts.
	prometheusRules []prometheusRule
	// objects is every object's metadata, and sources the template each
	// came from, by "<kind>/<name>".
	objects []metav1.Object
	sources map[string]string
}

var (
	docSeparator = regexp.MustCompile(`(?m)^---\s*$`)
	sourceLine   = regexp.MustCompile(`(?m)^# Source: (\S+)$`)
)

func parse(t *testing.T, out string) rendered {
	t.Helper()
	r := rendered{sources: map[string]string{}}
	for _, doc := range docSeparator.Split(out, -1) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue // comments only
		}
		var obj metav1.Object
		switch meta.Kind {
		case "Deployment":
			obj = decode(t, doc, &r.deployments)
		case "DaemonSet":
			obj = decode(t, doc, &r.daemonSets)
		case "Role":
			obj = decode(t, doc, &r.roles)
		case "RoleBinding":
			obj = decode(t, doc, &r.roleBindings)
		case "Service":
			obj = decode(t, doc, &r.services)
		case "ServiceAccount":
			obj = decode(t, doc, &r.accounts)
		case "PodDisruptionBudget":
			obj = decode(t, doc, &r.pdbs)
		case "ClusterRole":
			obj = decode(t, doc, &r.clusterRoles)
		case "ClusterRoleBinding":
			obj = decode(t, doc, &r.bindings)
		case "ConfigMap":
			obj = decode(t, doc, &r.configMaps)
		case "Certificate":
			obj = decode(t, doc, &r.certificates)
		case "CustomResourceDefinition":
			obj = decode(t, doc, &r.crds)
		case "NetworkPolicy":
			obj = decode(t, doc, &r.netpols)
		case "PodMonitor":
			obj = decode(t, doc, &r.podMonitors)
		case "PrometheusRule":
			obj = decode(t, doc, &r.prometheusRules)
		default:
			t.Fatalf("unexpected kind %s (add it to parse):\n%s", meta.Kind, doc)
		}
		r.objects = append(r.objects, obj)
		if m := sourceLine.FindStringSubmatch(doc); m != nil {
			r.sources[meta.Kind+"/"+obj.GetName()] = m[1]
		}
	}
	return r
}

// decode appends doc, decoded strictly, to list and returns a copy of it.
func decode[T any, PT interface {
	*T
	metav1.Object
}](t *testing.T, doc string, list *[]T) metav1.Object {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
		t.Fatalf("decoding %T: %v\n%s", v, err, doc)
	}
	*list = append(*list, v)
	return PT(&v)
}

// workload is the chart's one Deployment or DaemonSet: its name, selector
// and pod template.
func (r rendered) workload(t *testing.T) (string, *metav1.LabelSelector, corev1.PodTemplateSpec) {
	t.Helper()
	switch {
	case len(r.deployments) == 1 && len(r.daemonSets) == 0:
		d := r.deployments[0]
		return d.Name, d.Spec.Selector, d.Spec.Template
	case len(r.deployments) == 0 && len(r.daemonSets) == 1:
		d := r.daemonSets[0]
		return d.Name, d.Spec.Selector, d.Spec.Template
	}
	t.Fatalf("got %d Deployments and %d DaemonSets, want one of them", len(r.deployments), len(r.daemonSets))
	return "", nil, corev1.PodTemplateSpec{}
}

// checkCommon asserts what holds for every rendering of both charts.
func checkCommon(t *testing.T, r rendered) {
	t.Helper()
	for _, o := range r.objects {
		for _, k := range []string{
			"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
			"app.kubernetes.io/component", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "helm.sh/chart",
		} {
			if o.GetLabels()[k] == "" {
				t.Errorf("%s: no label %s", o.GetName(), k)
			}
		}
	}
	{
		name, selector, template := r.workload(t)
		sel, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(template.Labels)) {
			t.Errorf("%s: selector %s does not match its pod labels %v", name, sel, template.Labels)
		}
		pod := template.Spec
		if psc := pod.SecurityContext; psc == nil || !isTrue(psc.RunAsNonRoot) ||
			psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and seccomp RuntimeDefault", name, psc)
		}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			sc := c.SecurityContext
			if sc == nil || !isTrue(sc.RunAsNonRoot) || !isTrue(sc.ReadOnlyRootFilesystem) ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("container %s: securityContext %+v, want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL", c.Name, sc)
			}
			image := hubImage
			if strings.Contains(name, "spoke") {
				image = spokeImage
			}
			if c.Image != image {
				t.Errorf("container %s: image %q, want %q (no registry host, tag = appVersion)", c.Name, c.Image, image)
			}
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("container %s: no memory request or limit", c.Name)
			}
			mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.MountPath == tlsDir && m.ReadOnly && m.SubPath == ""
			})
			if !mounted {
				t.Errorf("container %s: the TLS Secret is not mounted read-only at %s without subPath", c.Name, tlsDir)
			}
		}
	}
	_, _, template := r.workload(t)
	for _, s := range r.services {
		sel := labels.SelectorFromSet(s.Spec.Selector)
		if !sel.Matches(labels.Set(template.Labels)) {
			t.Errorf("Service %s: selector %v does not select the pods", s.Name, s.Spec.Selector)
		}
		for _, p := range s.Spec.Ports {
			if p.Name == "debug" || p.TargetPort.StrVal == "debug" {
				t.Errorf("Service %s exposes the debug port", s.Name)
			}
		}
	}
}

func checkHubDefaults(t *testing.T, r rendered) {
	t.Helper()
	d := r.deployments[0]
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas %d, want 2", got)
	}
	checkPDB(t, r)
	checkAntiAffinity(t, d, "soft")
	if a := d.Spec.Template.Spec.Affinity; a.NodeAffinity != nil || a.PodAffinity != nil {
		t.Errorf("affinity %+v, want the pod anti-affinity only", a)
	}
	if len(r.clusterRoles)+len(r.bindings) != 0 {
		t.Errorf("the hub needs no RBAC")
	}
	if len(r.accounts) != 1 || !isFalse(r.accounts[0].AutomountServiceAccountToken) ||
		!isFalse(d.Spec.Template.Spec.AutomountServiceAccountToken) {
		t.Errorf("the hub's ServiceAccount token is mounted")
	}
	c := d.Spec.Template.Spec.Containers[0]
	flags := hubFlags(t, c.Args)
	wantFlags := map[string]string{
		"federation-addr": ":9443",
		"xds-addr":        ":15010",
		"xds-tls-cert":    "/etc/meshfed/xds-tls/tls.crt",
		"xds-tls-ca":      "/etc/meshfed/xds-tls/ca.crt",
		"debug-addr":      ":8080",
		"tls-cert":        tlsDir + "/tls.crt",
		"tls-key":         tlsDir + "/tls.key",
		"tls-ca":          tlsDir + "/ca.crt",
		"trust-domain":    "cluster.local",
	}
	checkFlags(t, flags, wantFlags)
	checkPorts(t, c.Ports, map[string]int32{"federation": 9443, "xds": 15010, "debug": 8080})
	checkHubServices(t, r, map[string]int32{"federation": 9443, "xds": 15010}, 9443, 15010)
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.StrVal != "debug" {
			t.Errorf("probe %+v, want GET %s on port debug", p.probe, p.path)
		}
	}
	// meshfed status --kubeconfig finds the hub's pods by
	// app.kubernetes.io/name=meshfed-hub (its --hub-selector's default),
	// and forwards to their container port named debug.
	if got := d.Spec.Template.Labels["app.kubernetes.io/name"]; got != "meshfed-hub" {
		t.Errorf("pod label app.kubernetes.io/name=%q: meshfed status's default --hub-selector does not find the pods", got)
	}
}

func checkHubHAXDS(t *testing.T, r rendered) {
	t.Helper()
	d := r.deployments[0]
	if got := *d.Spec.Replicas; got != 3 {
		t.Errorf("replicas %d, want 3", got)
	}
	checkPDB(t, r)
	checkAntiAffinity(t, d, "hard")
	if a := d.Spec.Template.Spec.Affinity; a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Errorf("affinity %+v: the nodeAffinity value is lost", a)
	}
	c := d.Spec.Template.Spec.Containers[0]
	checkFlags(t, hubFlags(t, c.Args), map[string]string{
		"xds-addr": ":15010", "debug-addr": ":8080",
		"xds-tls-cert": "/etc/meshfed/xds-tls/tls.crt", "xds-tls-key": "/etc/meshfed/xds-tls/tls.key", "xds-tls-ca": "/etc/meshfed/xds-tls/ca.crt",
	})
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "xds-tls" && v.Secret != nil && v.Secret.SecretName == "meshfed-hub-xds-tls"
	}) {
		t.Errorf("no xds-tls volume from the Secret meshfed-hub-xds-tls: %+v", d.Spec.Template.Spec.Volumes)
	}
	checkCertificate(t, r, "meshfed-hub-tls", "spiffe://cluster.local/meshfed/hub", "server auth")
	if len(r.netpols) != 1 {
		t.Fatalf("%d NetworkPolicies, want one", len(r.netpols))
	}
	ingress := r.netpols[0].Spec.Ingress
	if len(ingress) != 3 || len(ingress[0].From) != 0 || len(ingress[1].From) != 0 || len(ingress[2].From) != 1 ||
		ingress[2].Ports[0].Port.String() != "debug" {
		t.Errorf("hub NetworkPolicy ingress %+v; want federation and xDS from anywhere, debug from the monitoring namespace only", ingress)
	}
	if names := r.certificates[0].Spec.DNSNames; !slices.Contains(names, "hub.example.com") || !slices.Contains(names, "meshfed-hub-sync.meshfed.svc") {
		t.Errorf("hub certificate DNS names %v; want the sync Service's and hub.example.com", names)
	}
	// The cluster policy: a ConfigMap the hub itself accepts, mounted where
	// --clusters-config points.
	checkFlags(t, hubFlags(t, c.Args), map[string]string{"clusters-config": "/etc/meshfed/clusters/clusters.yaml"})
	if len(r.configMaps) != 1 {
		t.Fatalf("%d ConfigMaps, want the cluster policy's", len(r.configMaps))
	}
	p, err := policy.Parse([]byte(r.configMaps[0].Data["clusters.yaml"]), "cluster.local")
	if err != nil || !slices.Equal(p.Clusters(), []federation.ClusterID{"east", "west"}) {
		t.Errorf("the rendered cluster policy: %v, %v\n%s", p, err, r.configMaps[0].Data["clusters.yaml"])
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "clusters" && v.ConfigMap != nil && v.ConfigMap.Name == r.configMaps[0].Name
	}) {
		t.Errorf("the cluster policy's ConfigMap is not mounted: %+v", d.Spec.Template.Spec.Volumes)
	}
	checkPorts(t, c.Ports, map[string]int32{"federation": 9443, "xds": 15010, "debug": 8080})
	checkHubServices(t, r, map[string]int32{"federation": 9443, "xds": 15010}, 9443, 15010)
	want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
	if diff := cmp.Diff(want, d.Spec.Template.Annotations); diff != "" {
		t.Errorf("pod annotations (-want +got):\n%s", diff)
	}
}

func checkHubSingle(t *testing.T, r rendered) {
	t.Helper()
	d := r.deployments[0]
	if got := *d.Spec.Replicas; got != 1 {
		t.Errorf("replicas %d, want 1", got)
	}
	if len(r.pdbs) != 0 {
		t.Errorf("a PodDisruptionBudget with one replica")
	}
	checkAntiAffinity(t, d, "none")
	if a := d.Spec.Template.Spec.Affinity; a != nil {
		t.Errorf("affinity %+v with podAntiAffinity none and no affinity value", a)
	}
	checkHubServices(t, r, map[string]int32{"federation": 9443, "xds": 15010}, 9443, 15010)
}

func checkHubUserAffinity(t *testing.T, r rendered) {
	t.Helper()
	want := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey:   "topology.kubernetes.io/zone",
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "meshfed-hub"}},
		}},
	}}
	if diff := cmp.Diff(want, r.deployments[0].Spec.Template.Spec.Affinity); diff != "" {
		t.Errorf("the affinity value's podAntiAffinity does not replace the chart's (-want +got):\n%s", diff)
	}
}

// checkPDB asserts the hub's PodDisruptionBudget: one, over the hub's pods,
// with maxUnavailable 1.
func checkPDB(t *testing.T, r rendered) {
	t.Helper()
	if len(r.pdbs) != 1 {
		t.Fatalf("got %d PodDisruptionBudgets, want 1", len(r.pdbs))
	}
	sel, err := metav1.LabelSelectorAsSelector(r.pdbs[0].Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(r.deployments[0].Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %s does not select the hub pods", sel)
	}
	if mu := r.pdbs[0].Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", mu)
	}
}

// checkAntiAffinity asserts the chart's anti-affinity between the hub's pods
// over kubernetes.io/hostname: preferred ("soft"), required ("hard") or
// absent ("none").
func checkAntiAffinity(t *testing.T, d appsv1.Deployment, mode string) {
	t.Helper()
	var preferred []corev1.WeightedPodAffinityTerm
	var required []corev1.PodAffinityTerm
	if a := d.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		preferred = a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		required = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	terms := required
	switch mode {
	case "soft":
		if len(preferred) != 1 || len(required) != 0 || preferred[0].Weight != 100 {
			t.Fatalf("pod anti-affinity: preferred %+v, required %+v; want one preferred term of weight 100", preferred, required)
		}
		terms = []corev1.PodAffinityTerm{preferred[0].PodAffinityTerm}
	case "hard":
		if len(preferred) != 0 || len(required) != 1 {
			t.Fatalf("pod anti-affinity: preferred %+v, required %+v; want one required term", preferred, required)
		}
	case "none":
		if len(preferred)+len(required) != 0 {
			t.Errorf("pod anti-affinity: preferred %+v, required %+v; want none", preferred, required)
		}
		return
	}
	term := terms[0]
	if term.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("pod anti-affinity over %q, want kubernetes.io/hostname", term.TopologyKey)
	}
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("pod anti-affinity selector %q does not select the hub pods", sel)
	}
}

// spokeRules is every permission the spoke may have: what spoke/source/kube
// lists and watches, and what spoke/writeback writes: the ServiceExport
// status, the Events of the objects the spoke rejects, and the imports
// (ServiceImports, their status, the MCS EndpointSlices).
var spokeRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services", "pods", "nodes", "namespaces"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceexports"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceexports/status"}, Verbs: []string{"update"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports/status"}, Verbs: []string{"update"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
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

// hubFlags parses args as `meshfed hub` does and validates the result, so the
// chart cannot pass a flag the hub lacks.
func hubFlags(t *testing.T, args []string) *flag.FlagSet {
	t.Helper()
	cfg := hub.DefaultConfig()
	fs := commandFlags(t, "hub", args, cfg.AddFlags)
	if err := cfg.Validate(); err != nil {
		t.Errorf("hub config from the chart: %v", err)
	}
	return fs
}

// spokeFlags parses args as `meshfed spoke` does in a pod, and validates
// the result: the chart passes no source flag, so the spoke reads the
// cluster it runs in.
func spokeFlags(t *testing.T, args []string) *flag.FlagSet {
	t.Helper()
	cfg := spoke.DefaultConfig()
	cfg.InCluster = true
	fs := commandFlags(t, "spoke", args, cfg.AddFlags)
	if err := cfg.Validate(); err != nil {
		t.Errorf("spoke config from the chart: %v", err)
	}
	return fs
}

func commandFlags(t *testing.T, command string, args []string, addFlags func(*flag.FlagSet)) *flag.FlagSet {
	t.Helper()
	if len(args) == 0 || args[0] != command {
		t.Fatalf("args %q, want %q first", args, command)
	}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addFlags(fs)
	// cmd/meshfed's log flags, declared by the command rather than the config.
	fs.String("log-level", "info", "")
	fs.String("log-format", "text", "")
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("meshfed %s %q: %v", command, args[1:], err)
	}
	if fs.NArg() != 0 {
		t.Errorf("meshfed %s: stray arguments %q", command, fs.Args())
	}
	return fs
}

func checkFlags(t *testing.T, fs *flag.FlagSet, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for name := range want {
		got[name] = fs.Lookup(name).Value.String()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s flags (-want +got):\n%s", fs.Name(), diff)
	}
}

func checkPorts(t *testing.T, ports []corev1.ContainerPort, want map[string]int32) {
	t.Helper()
	got := map[string]int32{}
	for _, p := range ports {
		got[p.Name] = p.ContainerPort
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("container ports (-want +got):\n%s", diff)
	}
}

// checkHubServices asserts the hub's Services: meshfed-hub, not headless,
// with the ports combined (nil: none rendered); meshfed-hub-sync, headless
// with the federation port alone and every replica, ready or not, for
// spokes to resolve every replica; and, when xds is not 0,
// meshfed-hub-xds with the xDS port alone and only the ready replicas,
// for proxies. It returns them by name.
func checkHubServices(t *testing.T, r rendered, combined map[string]int32, federation, xds int32) map[string]corev1.Service {
	t.Helper()
	byName := map[string]corev1.Service{}
	for _, s := range r.services {
		byName[s.Name] = s
	}
	want := []string{"meshfed-hub-sync"}
	if combined != nil {
		want = append(want, "meshfed-hub")
	}
	if xds != 0 {
		want = append(want, "meshfed-hub-xds")
	}
	if got := slices.Sorted(maps.Keys(byName)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("got Services %v, want %v", got, slices.Sorted(slices.Values(want)))
	}
	if combined != nil {
		svc := byName["meshfed-hub"]
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			t.Errorf("Service meshfed-hub is headless")
		}
		checkServicePorts(t, svc, combined)
	}
	sync := byName["meshfed-hub-sync"]
	if sync.Spec.ClusterIP != corev1.ClusterIPNone || (sync.Spec.Type != "" && sync.Spec.Type != corev1.ServiceTypeClusterIP) {
		t.Errorf("Service meshfed-hub-sync: type %q, clusterIP %q; want headless (clusterIP None)", sync.Spec.Type, sync.Spec.ClusterIP)
	}
	if !sync.Spec.PublishNotReadyAddresses {
		t.Error("Service meshfed-hub-sync does not publish replicas that are not ready: a replica warms up on its spokes' streams, so spokes must reach it before it is ready")
	}
	checkServicePorts(t, sync, map[string]int32{"federation": federation})
	if xds != 0 {
		svc := byName["meshfed-hub-xds"]
		if svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service meshfed-hub-xds: clusterIP %q, publishNotReadyAddresses %t; want one address for the ready replicas alone (a warming replica has a partial clusterset)",
				svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
		}
		checkServicePorts(t, svc, map[string]int32{"xds": xds})
	}
	return byName
}

// checkHubServicesOptions: the Services' options for a platform: no
// combined Service, a LoadBalancer for proxies in other clusters, and a
// host port with external-dns on the sync Service for spokes in others.
func checkHubServicesOptions(t *testing.T, r rendered) {
	t.Helper()
	byName := checkHubServices(t, r, nil, 9443, 15010)
	xds := byName["meshfed-hub-xds"]
	if xds.Spec.Type != corev1.ServiceTypeLoadBalancer || !slices.Equal(xds.Spec.LoadBalancerSourceRanges, []string{"10.0.0.0/8"}) ||
		xds.Annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] != "true" {
		t.Errorf("Service meshfed-hub-xds: %+v; want an internal LoadBalancer admitting 10.0.0.0/8", xds)
	}
	sync := byName["meshfed-hub-sync"]
	if sync.Annotations["external-dns.alpha.kubernetes.io/endpoints-type"] != "NodeExternalIP" {
		t.Errorf("Service meshfed-hub-sync annotations %v; want external-dns's", sync.Annotations)
	}
	for _, s := range r.services {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer && slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "federation" }) {
			t.Errorf("Service %s load-balances the federation port: a spoke would reach one replica", s.Name)
		}
	}
	_, _, template := r.workload(t)
	var federation *corev1.ContainerPort
	for i, p := range template.Spec.Containers[0].Ports {
		if p.Name == "federation" {
			federation = &template.Spec.Containers[0].Ports[i]
		}
	}
	if federation == nil || federation.HostPort != 9443 || federation.ContainerPort != 9443 {
		t.Errorf("federation container port %+v; want 9443 on the node too", federation)
	}
}

func checkServicePorts(t *testing.T, svc corev1.Service, want map[string]int32) {
	t.Helper()
	got := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		got[p.Name] = p.Port
		if p.TargetPort.StrVal != p.Name {
			t.Errorf("Service port %s targets %s, want the container port of the same name", p.Name, p.TargetPort.String())
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Service %s ports (-want +got):\n%s", svc.Name, diff)
	}
}

func isTrue(b *bool) bool  { return b != nil && *b }
func isFalse(b *bool) bool { return b != nil && !*b }

// certificate is the part of a cert-manager Certificate the charts set.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName  string   `json:"secretName"`
		DNSNames    []string `json:"dnsNames"`
		URIs        []string `json:"uris"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		Usages    []string          `json:"usages"`
		IssuerRef map[string]string `json:"issuerRef"`
	} `json:"spec"`
}

// checkCertificate asserts the one Certificate rendered issues secret with
// the SPIFFE ID id for usage.
func checkCertificate(t *testing.T, r rendered, secret, id, usage string) {
	t.Helper()
	if len(r.certificates) != 1 {
		t.Fatalf("%d Certificates, want one", len(r.certificates))
	}
	c := r.certificates[0].Spec
	if c.SecretName != secret || !slices.Equal(c.URIs, []string{id}) || !slices.Contains(c.Usages, usage) || c.IssuerRef["name"] != "meshfed-ca" {
		t.Errorf("Certificate %+v; want %s with URI SAN %s for %s from meshfed-ca", c, secret, id, usage)
	}
}

// podMonitor is the part of a Prometheus Operator PodMonitor the charts set.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

func checkPodMonitor(t *testing.T, r rendered) {
	t.Helper()
	if len(r.podMonitors) != 1 {
		t.Fatalf("%d PodMonitors, want one", len(r.podMonitors))
	}
	pm := r.podMonitors[0]
	_, _, template := r.workload(t)
	if pm.Labels["release"] != "prometheus" || len(pm.Spec.PodMetricsEndpoints) != 1 ||
		pm.Spec.PodMetricsEndpoints[0].Port != "debug" || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" {
		t.Errorf("PodMonitor %+v; want /metrics on the debug port, with the release label", pm)
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if template.Labels[k] != v {
			t.Errorf("the PodMonitor selects %s=%s, which the pods do not carry", k, v)
		}
	}
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
	var svc *corev1.Service
	for i := range r.services {
		if strings.HasSuffix(r.services[i].Name, "-mcp") {
			svc = &r.services[i]
		}
	}
	if svc == nil || svc.Spec.Ports[0].Port != 15011 || svc.Spec.Ports[0].TargetPort.StrVal != "grpc-mcp" {
		t.Fatalf("the MCP Service: %+v", svc)
	}
	for k, v := range svc.Spec.Selector {
		if template.Labels[k] != v {
			t.Errorf("the MCP Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if len(r.netpols) != 1 || len(r.netpols[0].Spec.Ingress) != 1 ||
		r.netpols[0].Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "istio-system" {
		t.Errorf("NetworkPolicy %+v, want the MCP port open to istio-system", r.netpols)
	}
}
