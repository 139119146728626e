package shard

import (
	"io"
	"log/slog"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
)

type demoObjects struct {
	in     *normalizetest.Inputs
	pod    *corev1.Pod
	node   *corev1.Node
	export *mcsv1beta1.ServiceExport
}

func demoInputs() demoObjects {
	meta := func(ns, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.Unix(1000, 0)}
	}
	pod := &corev1.Pod{
		ObjectMeta: meta("demo", "echo-a"),
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	pod.Labels = map[string]string{"app": "echo"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{
		"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": "z1",
	}}}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: meta("demo", "echo")}
	in := normalizetest.NewInputs(pod, node, export,
		&corev1.Service{
			ObjectMeta: meta("demo", "echo"),
			Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP}}},
		},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "echo-1", Labels: map[string]string{"kubernetes.io/service-name": "echo"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses: []string{"10.0.0.1"}, NodeName: ptr.To("node-a"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "echo-a"},
			}},
		})
	return demoObjects{in: in, pod: pod, node: node, export: export}
}

func TestBuilderFollowsChanges(t *testing.T) {
	d := demoInputs()
	in := d.in
	tr := NewTracker()
	b := NewBuilder(normalize.Options{ClusterID: "east", Network: "n1"}, tr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.Apply(in, nil)
	if tr.cluster.GetNetwork() != "n1" || len(tr.services) != 1 || tr.nEndpoint != 1 || len(tr.workloads) != 1 {
		t.Fatalf("initial shard: cluster %v, %d services, %d endpoints, %d workloads", tr.cluster, len(tr.services), tr.nEndpoint, len(tr.workloads))
	}
	endpoint := func() string {
		for _, r := range tr.endpoints["demo/echo"] {
			e := decode(t, r).GetEndpoints()[0]
			return e.GetLocality().GetZone() + "|" + e.GetNetwork()
		}
		return "none"
	}
	if got := endpoint(); got != "z1|" {
		t.Fatalf("endpoint zone|network = %q", got)
	}
	next(t, tr, "x")
	tr.Acked(1)

	// A node moved to another zone: its endpoints and workloads follow.
	d.node.Labels["topology.kubernetes.io/zone"] = "z2"
	b.Apply(in, []normalize.Change{{Kind: normalize.KindNode, Name: "node-a"}})
	if got := endpoint(); got != "z2|" {
		t.Errorf("after the node moved: %q", got)
	}
	for _, r := range tr.workloads {
		if w := decode(t, r).GetWorkloads()[0]; w.GetLocality().GetZone() != "z2" {
			t.Errorf("workload zone %q after the node moved", w.GetLocality().GetZone())
		}
	}

	// A pod labelled with another network.
	d.pod.Labels["topology.istio.io/network"] = "n2"
	b.Apply(in, []normalize.Change{{Kind: normalize.KindPod, Namespace: "demo", Name: "echo-a"}})
	if got := endpoint(); got != "z2|n2" {
		t.Errorf("after the pod's network label: %q", got)
	}

	// The export goes away: the service, its endpoints and its workloads leave.
	in.Delete(d.export)
	b.Apply(in, []normalize.Change{{Kind: normalize.KindServiceExport, Namespace: "demo", Name: "echo"}})
	if len(tr.services) != 0 || tr.nEndpoint != 0 || len(tr.workloads) != 0 {
		t.Errorf("after unexport: %d services, %d endpoints, %d workloads", len(tr.services), tr.nEndpoint, len(tr.workloads))
	}
	u := next(t, tr, "y")
	if len(u.GetRemovedServices()) != 1 || len(u.GetRemovedEndpoints()) != 1 || len(u.GetRemovedWorkloads()) != 1 {
		t.Errorf("the delta after unexport: %v", u)
	}
}

// decode returns an update holding only r.
func decode(t *testing.T, r record) *federationpb.ShardUpdate {
	t.Helper()
	var u federationpb.ShardUpdate
	if err := proto.Unmarshal([]byte(r), &u); err != nil {
		t.Fatal(err)
	}
	return &u
}
