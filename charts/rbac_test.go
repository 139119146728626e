package charts_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// serviceAccount is a ServiceAccount's token, as a kubeconfig file and as
// a client.
type serviceAccount struct {
	account    corev1.ServiceAccount
	kubeconfig string
	client     kubernetes.Interface
	mcs        mcsclientset.Interface
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
