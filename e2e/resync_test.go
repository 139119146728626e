//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
	"github.com/meshfed/meshfed/spoke/shard"
)

// TestSyncHubLostTheShard moves a spoke (tracker, builder and uplink) to a
// hub that never saw it, as a restarted hub is: the tracker keeps no copy
// of the shard, so the builder writes it anew, and the new hub gets every
// service, endpoint and workload, then the changes that follow.
func TestSyncHubLostTheShard(t *testing.T) {
	const n = 20
	objs := []metav1.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
			Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP}}},
		},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "echo-1", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](8080)}},
	}
	for i := range n {
		name, ip := fmt.Sprintf("echo-%d", i), fmt.Sprintf("10.0.0.%d", i+1)
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name, UID: types.UID("uid-" + name)},
			Status: corev1.PodStatus{
				Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			},
		})
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ip}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: name},
		})
	}
	in := normalizetest.NewInputs(append(objs, slice)...)

	first, second := newMemHub(t, registry.Limits{}, 4<<20), newMemHub(t, registry.Limits{}, 4<<20)
	tr := newTracker()
	b := shard.NewBuilder(normalize.Options{ClusterID: "east", Network: "n1"}, tr.Tracker, testLogger(t))
	runInBackground(t, b.Run)
	b.Apply(in, nil)
	d := &killableDialer{client: first.client}
	u := runUplink(t, "east", tr, d.dial)
	whole := func(s clusterset.Snapshot, endpoints int) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == endpoints && s.WorkloadCount() == endpoints
	}
	await(t, first.reg, "the first hub's sync", func(s clusterset.Snapshot) bool { return whole(s, n) })
	testwait.For(t, "ack of the full state", func() bool { return ackedVersion(tr) == 1 })

	d.mu.Lock()
	d.client = second.client
	d.mu.Unlock()
	d.kill()
	await(t, second.reg, "the second hub's sync", func(s clusterset.Snapshot) bool { return whole(s, n) })
	if st := u.Status(); st.Resumed {
		t.Errorf("uplink status %+v: the second hub resumed a session it never had", st)
	}

	// Later changes reach the second hub as deltas.
	in.Delete(objs[len(objs)-1]) // the last pod
	slice.Endpoints = slice.Endpoints[:n-1]
	b.Apply(in, []normalize.Change{
		{Kind: normalize.KindEndpointSlice, Namespace: "demo", Name: "echo"},
		{Kind: normalize.KindPod, Namespace: "demo", Name: fmt.Sprintf("echo-%d", n-1)},
	})
	await(t, second.reg, "the change after the resync", func(s clusterset.Snapshot) bool { return whole(s, n-1) })
	if fulls := second.fullChunks(); fulls != 1 {
		t.Errorf("the second hub received %d chunks of full updates, want 1", fulls)
	}
}
