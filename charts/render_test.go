package charts_test

import (
	"regexp"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/yaml"
)

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
	// clusterProperties are the About API's (KEP-2149).
	clusterProperties []clusterProperty
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
		case "ClusterProperty":
			obj = decode(t, doc, &r.clusterProperties)
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
