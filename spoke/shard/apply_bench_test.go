package shard

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
)

// clusterInputs is a cluster of services exported services with perService
// ready endpoints each, a pod behind each endpoint, on nodes nodes.
func clusterInputs(services, perService, nodes int) *normalizetest.Inputs {
	var objs []metav1.Object
	for n := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", n), Labels: map[string]string{
			"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": fmt.Sprintf("z%d", n%3),
		}}})
	}
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}})
	for s := range services {
		name := fmt.Sprintf("svc-%d", s)
		objs = append(objs,
			&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name}},
			&corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name},
				Spec:       corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.%d.%d", s/256, s%256), Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP}}},
			})
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](8080)}},
		}
		for e := range perService {
			i := s*perService + e
			pod, ip, node := fmt.Sprintf("%s-%d", name, e), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), fmt.Sprintf("node-%d", i%nodes)
			objs = append(objs, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: pod, UID: types.UID("uid-" + pod), Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{NodeName: node},
				Status: corev1.PodStatus{
					Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}},
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				},
			})
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{ip}, NodeName: ptr.To(node),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: pod},
			})
		}
		objs = append(objs, slice)
	}
	return normalizetest.NewInputs(objs...)
}

// BenchmarkBuilderFirstShard is a spoke's initial sync without the API:
// the builder's first Apply and the tracker's first (full) update, taken
// chunk by chunk as the uplink does.
func BenchmarkBuilderFirstShard(b *testing.B) {
	for _, services := range []int{500, 5_000} {
		b.Run(fmt.Sprintf("endpoints=%d", services*10), func(b *testing.B) {
			in := clusterInputs(services, 10, services/10)
			b.ReportAllocs()
			for b.Loop() {
				tr := newTracked()
				NewBuilder(normalize.Options{ClusterID: "east", Network: "n1"}, tr.Tracker, slog.New(slog.NewTextHandler(io.Discard, nil))).Apply(in, nil)
				u := tr.Next("n", 4<<20)
				for i := range u.Len() {
					_ = u.Chunk(i)
				}
			}
		})
	}
}
