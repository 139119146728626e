package shard

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

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
	tr := newTracked()
	b := NewBuilder(normalize.Options{ClusterID: "east", Network: "n1"}, tr.Tracker, slog.New(slog.NewTextHandler(io.Discard, nil)))
	runBuilder(t, b)
	b.Apply(in, nil)
	if services, endpoints, workloads := tr.Counts(); services != 1 || endpoints != 1 || workloads != 1 {
		t.Fatalf("initial shard: %d services, %d endpoints, %d workloads", services, endpoints, workloads)
	}
	// sent returns the next update's endpoint and workload as zone|network,
	// and acknowledges it.
	sent := func() (endpoint, workload string) {
		t.Helper()
		u := next(t, tr, "n")
		if u == nil {
			t.Fatal("nothing sent")
		}
		tr.Acked(u.GetVersion())
		endpoint, workload = "none", "none"
		if eps := u.GetEndpoints(); len(eps) == 1 {
			endpoint = eps[0].GetLocality().GetZone() + "|" + eps[0].GetNetwork()
		}
		if wls := u.GetWorkloads(); len(wls) == 1 {
			workload = wls[0].GetLocality().GetZone() + "|" + wls[0].GetNetwork()
		}
		return endpoint, workload
	}
	if e, w := sent(); e != "z1|" || w != "z1|" {
		t.Fatalf("initial endpoint and workload zone|network: %q, %q", e, w)
	}

	// A node moved to another zone: its endpoints and workloads follow.
	d.node.Labels["topology.kubernetes.io/zone"] = "z2"
	b.Apply(in, []normalize.Change{{Kind: normalize.KindNode, Name: "node-a"}})
	if e, w := sent(); e != "z2|" || w != "z2|" {
		t.Errorf("after the node moved: %q, %q", e, w)
	}

	// A pod labelled with another network.
	d.pod.Labels["topology.istio.io/network"] = "n2"
	b.Apply(in, []normalize.Change{{Kind: normalize.KindPod, Namespace: "demo", Name: "echo-a"}})
	if e, w := sent(); e != "z2|n2" || w != "z2|n2" {
		t.Errorf("after the pod's network label: %q, %q", e, w)
	}

	// The hub lost the shard: the builder writes it anew, as it is now.
	tr.Reconnected(false, 0)
	u := awaitNext(t, tr, "full")
	if !u.GetFull() || len(u.GetServices()) != 1 || len(u.GetEndpoints()) != 1 || len(u.GetWorkloads()) != 1 ||
		u.GetEndpoints()[0].GetNetwork() != "n2" || u.GetCluster().GetNetwork() != "n1" {
		t.Fatalf("the full state after a reconnect: %v", u)
	}
	tr.Acked(u.GetVersion())

	// The export goes away: the service, its endpoints and its workloads leave.
	in.Delete(d.export)
	b.Apply(in, []normalize.Change{{Kind: normalize.KindServiceExport, Namespace: "demo", Name: "echo"}})
	if services, endpoints, workloads := tr.Counts(); services != 0 || endpoints != 0 || workloads != 0 {
		t.Errorf("after unexport: %d services, %d endpoints, %d workloads", services, endpoints, workloads)
	}
	u = next(t, tr, "y")
	if len(u.GetRemovedServices()) != 1 || len(u.GetRemovedEndpoints()) != 1 || len(u.GetRemovedWorkloads()) != 1 {
		t.Errorf("the delta after unexport: %v", u)
	}
}

// runBuilder runs b's resyncs until the test ends.
func runBuilder(t *testing.T, b *Builder) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("builder: %v", err)
		}
	})
}

// awaitNext returns the tracker's next update once there is one: after a
// resync, once the builder has written the shard anew.
func awaitNext(t *testing.T, tr tracked, nonce string) *federationpb.ShardUpdate {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if u := next(t, tr, nonce); u != nil {
			return u
		}
		select {
		case <-tr.Changed():
		case <-ctx.Done():
			t.Fatalf("no update: %v", ctx.Err())
		}
	}
}
