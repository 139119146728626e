package kube

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
)

// transformFunc returns the informer transform of obj's kind.
func transformFunc(t *testing.T, tr *transforms, obj any) cache.TransformFunc {
	t.Helper()
	switch obj.(type) {
	case *corev1.Service:
		return transform(tr.service)
	case *corev1.Pod, *normalize.Pod:
		return transform(tr.pod)
	case *corev1.Node:
		return transform(tr.node)
	case *corev1.Namespace:
		return transform(tr.namespace)
	case *discoveryv1.EndpointSlice, *normalize.EndpointSlice:
		return transform(tr.endpointSlice)
	case *mcsv1beta1.ServiceExport:
		return transform(tr.serviceExport)
	}
	t.Fatalf("no transform for %T", obj)
	return nil
}

// transformAll returns the transformed objects: a *normalize.Pod for a
// *corev1.Pod, else one of the same type.
func transformAll[T any](t *testing.T, objs []T) []any {
	t.Helper()
	tr := newTransforms()
	out := make([]any, len(objs))
	for i, o := range objs {
		var in any = o
		if ro, ok := in.(runtime.Object); ok {
			in = ro.DeepCopyObject()
		}
		got, err := transformFunc(t, tr, in)(in)
		if err != nil {
			t.Fatalf("transform %T: %v", o, err)
		}
		out[i] = got
	}
	return out
}

// TestTransformKeepsWhatNormalizeReads is the invariant of the transforms:
// normalizing the cached objects gives what normalizing the API server's
// objects gives.
func TestTransformKeepsWhatNormalizeReads(t *testing.T) {
	objs := normalizetest.Cluster()
	before, after := normalizetest.InputsOf(objs), normalizetest.InputsOf(transformAll(t, objs))
	for _, policy := range []normalize.ExportPolicy{normalize.ExportExported, normalize.ExportAll} {
		t.Run(string(policy), func(t *testing.T) {
			opts := normalizetest.Options
			opts.Export = policy
			want, got := fullShard(t, before, opts), fullShard(t, after, opts)
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("shard from transformed objects (-want +got):\n%s", diff)
			}
			if policy == normalize.ExportExported {
				checkFixtureShard(t, want)
			}
		})
	}
	// Pods behind no exported service, and the export decisions.
	for _, p := range before.Pods("") {
		pa, _ := after.Pod(p.Namespace, p.Name)
		want, wantErr := normalize.Workload(before, normalizetest.Options, normalize.PodOf(p))
		got, gotErr := normalize.Workload(after, normalizetest.Options, pa)
		if wantErr != nil || gotErr != nil {
			t.Errorf("workload of pod %s/%s: errors %v, %v", p.Namespace, p.Name, wantErr, gotErr)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("workload of pod %s/%s (-want +got):\n%s", p.Namespace, p.Name, diff)
		}
	}
	for _, name := range []string{"echo", "db", "ext", "ghost"} {
		_, want, _ := normalize.Service(before, normalizetest.Options, "demo", name)
		_, got, _ := normalize.Service(after, normalizetest.Options, "demo", name)
		if want != got {
			t.Errorf("export status of demo/%s = %+v, want %+v", name, got, want)
		}
	}
}

// checkFixtureShard makes sure the fixture exercises what the transforms
// must keep, so that TestTransformKeepsWhatNormalizeReads means something.
func checkFixtureShard(t *testing.T, u *federationpb.ShardUpdate) {
	t.Helper()
	if len(u.Services) != 2 || len(u.Endpoints) != 6 || len(u.Workloads) != 4 {
		t.Fatalf("fixture shard: %d services, %d endpoints, %d workloads; want 2, 6, 4:\n%v",
			len(u.Services), len(u.Endpoints), len(u.Workloads), u)
	}
	if got := u.Cluster.GetNetwork(); got != "net-east" {
		t.Errorf("cluster network %q, want the system namespace's", got)
	}
	if got := len(u.Cluster.GetGateways()); got != 6 {
		t.Errorf("%d gateways, want 3 addresses × 2 ports", got)
	}
	if got := u.Services[0].GetPorts()[0].GetTargetPortName(); got != "grpc" {
		t.Errorf("echo target port name %q", got)
	}
	byName := map[string]*federationpb.Workload{}
	for _, w := range u.Workloads {
		byName[w.GetName()] = w
	}
	checks := []struct {
		pod, what string
		ok        bool
	}{
		{"echo-a", "ambient", byName["echo-a"].GetAmbient()},
		{"echo-a", "app and version", byName["echo-a"].GetApp() == "echo" && byName["echo-a"].GetVersion() == "v1"},
		{"echo-a", "locality", byName["echo-a"].GetLocality().GetSubzone() == "rack-node-a"},
		{"echo-a", "ready", byName["echo-a"].GetReady()},
		{"echo-a", "service account", byName["echo-a"].GetServiceAccount() == "echo-sa"},
		{"echo-b", "pod network", byName["echo-b"].GetNetwork() == "net-pod"},
		{"echo-b", "app.kubernetes.io labels", byName["echo-b"].GetApp() == "echo" && byName["echo-b"].GetVersion() == "v2"},
		{"echo-c", "canonical labels", byName["echo-c"].GetCanonicalName() == "echo-canonical" && byName["echo-c"].GetCanonicalRevision() == "r3"},
		{"cache-0", "namespace network", byName["cache-0"].GetNetwork() == "net-edge"},
		{"cache-0", "name from its ReplicaSet", byName["cache-0"].GetCanonicalName() == "echo"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("fixture workload %s: %s not as set up: %v", c.pod, c.what, byName[c.pod])
		}
	}
}

func TestTransformDropsTheRest(t *testing.T) {
	objs := normalizetest.Cluster()
	for i, o := range transformAll(t, objs) {
		m := o.(metav1.Object)
		if m.GetManagedFields() != nil || m.GetFinalizers() != nil {
			t.Errorf("%T %s: managedFields or finalizers kept", o, m.GetName())
		}
		if _, ok := m.GetLabels()["example.com/team"]; ok {
			t.Errorf("%T %s: label outside the allow-list kept", o, m.GetName())
		}
		if _, ok := m.GetAnnotations()["example.com/team"]; ok {
			t.Errorf("%T %s: annotation outside the allow-list kept", o, m.GetName())
		}
		var compact bool // a pod's or slice's version and age are not read
		switch o.(type) {
		case *normalize.Pod, *normalize.EndpointSlice:
			compact = true
		}
		if m.GetUID() == "" || !compact && (m.GetResourceVersion() == "" || m.GetCreationTimestamp() == (metav1.Time{})) {
			t.Errorf("%T %s: identity not kept", o, m.GetName())
		}
		again := transformAll(t, []any{o})[0]
		if !equality.Semantic.DeepEqual(o, again) {
			t.Errorf("%T %s: transform is not idempotent:\n%s", o, m.GetName(), cmp.Diff(o, again))
		}
		if orig := objs[i].(metav1.Object); len(orig.GetManagedFields()) == 0 {
			t.Errorf("fixture %T %s has no managedFields", objs[i], orig.GetName())
		}

		switch o := o.(type) {
		case *normalize.Pod:
			if o.ServiceAccount != "echo-sa" || o.HostNetwork != (o.Name == "agent") || o.ControllerKind != "ReplicaSet" {
				t.Errorf("pod %s: %+v", o.Name, o)
			}
		case *corev1.Node:
			if !equality.Semantic.DeepEqual(o.Spec, corev1.NodeSpec{}) || !equality.Semantic.DeepEqual(o.Status, corev1.NodeStatus{}) {
				t.Errorf("node %s: spec or status kept", o.Name)
			}
			if len(o.Labels) != 3 {
				t.Errorf("node %s labels %v, want the locality only", o.Name, o.Labels)
			}
		case *corev1.Service:
			if o.Spec.Selector != nil || o.Spec.ExternalName != "" || o.Spec.LoadBalancerSourceRanges != nil {
				t.Errorf("service %s spec: %+v", o.Name, o.Spec)
			}
			for _, p := range o.Spec.Ports {
				if p.NodePort != 0 {
					t.Errorf("service %s: node port kept", o.Name)
				}
			}
		case *normalize.EndpointSlice:
			if _, ok := o.Labels[discoveryv1.LabelManagedBy]; ok {
				t.Errorf("slice %s: managed-by label kept", o.Name)
			}
		case *mcsv1beta1.ServiceExport:
			// The exported labels and annotations go into the import.
			if o.Spec.ExportedLabels["tier"] != "web" || len(o.Status.Conditions) != 1 || o.Generation != 1 {
				t.Errorf("export %s: spec, status and generation kept? %+v", o.Name, o)
			}
		}
	}
}

func TestTransformPassesOtherTypes(t *testing.T) {
	tombstone := cache.DeletedFinalStateUnknown{Key: "demo/echo"}
	got, err := transform(newTransforms().service)(tombstone)
	if err != nil || got != tombstone {
		t.Errorf("transform(tombstone) = %v, %v; want it unchanged", got, err)
	}
}

// TestTransformSharesStrings: pods and endpoints on one node, in one
// namespace, hold one copy of its name.
func TestTransformSharesStrings(t *testing.T) {
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: strings.Clone("demo")},
			Spec:       corev1.PodSpec{NodeName: strings.Clone("node-a"), ServiceAccountName: strings.Clone("echo-sa")},
		}
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: "demo"},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To(strings.Clone("node-a")), Zone: ptr.To("z1")},
			{Addresses: []string{"10.0.0.2"}, NodeName: ptr.To(strings.Clone("node-a")), Zone: ptr.To(strings.Clone("z1"))},
		},
	}
	tr := newTransforms()
	a, b, s := tr.pod(pod("a")), tr.pod(pod("b")), tr.endpointSlice(slice)
	same := func(x, y string) bool { return x == y && unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.Node, b.Node) || !same(a.Node, s.Endpoints[0].Node) || !same(a.Node, s.Endpoints[1].Node) {
		t.Error("the node's name is held in several copies")
	}
	if !same(a.Namespace, b.Namespace) || !same(a.ServiceAccount, b.ServiceAccount) || !same(s.Endpoints[0].Zone, s.Endpoints[1].Zone) {
		t.Error("namespace, service account or zone held in several copies")
	}
}

func TestTransformSharesPodLabels(t *testing.T) {
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: labels}}
	}
	tr := newTransforms()
	a := tr.pod(pod("a", map[string]string{"app": "echo", "version": "v1", "example.com/team": "x"}))
	b := tr.pod(pod("b", map[string]string{"version": "v1", "app": "echo"}))
	c := tr.pod(pod("c", map[string]string{"app": "echo", "version": "v2"}))
	same := func(x, y map[string]string) bool {
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	if !same(a.Labels, b.Labels) {
		t.Errorf("pods with equal kept labels hold two maps: %v, %v", a.Labels, b.Labels)
	}
	if same(a.Labels, c.Labels) || c.Labels["version"] != "v2" {
		t.Errorf("pod c labels %v, want its own", c.Labels)
	}
	if d := tr.pod(pod("d", nil)); d.Labels != nil {
		t.Errorf("pod without labels: %v", d.Labels)
	}
}
