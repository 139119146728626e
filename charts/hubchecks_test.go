package charts_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/policy"
)

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
		"federation-addr":  ":9443",
		"xds-addr":         ":15010",
		"xds-tls-cert":     "/etc/meshfed/xds-tls/tls.crt",
		"xds-tls-ca":       "/etc/meshfed/xds-tls/ca.crt",
		"debug-addr":       ":8080",
		"tls-cert":         tlsDir + "/tls.crt",
		"tls-key":          tlsDir + "/tls.key",
		"tls-ca":           tlsDir + "/ca.crt",
		"trust-domain":     "cluster.local",
		"xds-workload-api": "false",
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
		"xds-addr": ":15010", "debug-addr": ":8080", "xds-workload-api": "true",
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
