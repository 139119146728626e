package normalize_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	pb "github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
)

func pod(name string, labels map[string]string, edit ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: meta("shop", name, labels),
		Spec:       corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "cart"},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      "10.0.0.1",
			PodIPs:     []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	p.UID = types.UID("uid-" + name)
	for _, e := range edit {
		e(p)
	}
	return p
}

func TestWorkload(t *testing.T) {
	base := func(name string, edit ...func(*pb.Workload)) *pb.Workload {
		w := &pb.Workload{
			Uid: "uid-" + name, Namespace: "shop", Name: name, Ips: []string{"10.0.0.1", "fd00::1"},
			ServiceAccount: "cart", Node: "node-a", Locality: localityA,
			CanonicalName: name, CanonicalRevision: "latest", Ready: true,
		}
		for _, e := range edit {
			e(w)
		}
		return w
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want *pb.Workload
	}{
		{name: "nil pod"},
		{name: "no IP", pod: pod("a", nil, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil })},
		{name: "succeeded", pod: pod("a", nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })},
		{name: "failed", pod: pod("a", nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })},
		{name: "host network", pod: pod("a", nil, func(p *corev1.Pod) { p.Spec.HostNetwork = true })},
		{
			name: "bare pod: canonical name is the pod name",
			pod:  pod("a", nil),
			want: base("a"),
		},
		{
			name: "recommended labels",
			pod: pod("a", map[string]string{
				normalize.LabelAppName: "cart", normalize.LabelApp: "legacy",
				normalize.LabelAppVersion: "v2", normalize.LabelVersion: "old",
			}),
			want: base("a", func(w *pb.Workload) {
				w.App, w.Version, w.CanonicalName, w.CanonicalRevision = "cart", "v2", "cart", "v2"
			}),
		},
		{
			name: "legacy labels",
			pod:  pod("a", map[string]string{normalize.LabelApp: "cart", normalize.LabelVersion: "v1"}),
			want: base("a", func(w *pb.Workload) {
				w.App, w.Version, w.CanonicalName, w.CanonicalRevision = "cart", "v1", "cart", "v1"
			}),
		},
		{
			name: "canonical labels win",
			pod: pod("a", map[string]string{
				normalize.LabelApp: "cart", normalize.LabelVersion: "v1",
				normalize.LabelCanonicalName: "cart-svc", normalize.LabelCanonicalRevision: "r7",
			}),
			want: base("a", func(w *pb.Workload) {
				w.App, w.Version, w.CanonicalName, w.CanonicalRevision = "cart", "v1", "cart-svc", "r7"
			}),
		},
		{
			name: "Deployment pod: canonical name is the Deployment's",
			pod: pod("cart-7d9f8-x2x", map[string]string{"pod-template-hash": "7d9f8"}, func(p *corev1.Pod) {
				p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "cart-7d9f8", Controller: ptr.To(true)}}
			}),
			want: base("cart-7d9f8-x2x", func(w *pb.Workload) { w.CanonicalName = "cart" }),
		},
		{
			name: "StatefulSet pod: canonical name is the StatefulSet's",
			pod: pod("db-0", nil, func(p *corev1.Pod) {
				p.OwnerReferences = []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", Controller: ptr.To(true)}}
			}),
			want: base("db-0", func(w *pb.Workload) { w.CanonicalName = "db" }),
		},
		{
			name: "ambient-enrolled pod",
			pod: pod("a", nil, func(p *corev1.Pod) {
				p.Annotations = map[string]string{normalize.AnnotationAmbientRedirection: "enabled"}
			}),
			want: base("a", func(w *pb.Workload) { w.Ambient = true }),
		},
		{
			name: "manifest pod: no uid, podIP only, default service account, not ready, unknown node",
			pod: pod("a", nil, func(p *corev1.Pod) {
				p.UID = ""
				p.Spec = corev1.PodSpec{NodeName: "gone"}
				p.Status.PodIPs = nil
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
			}),
			want: base("a", func(w *pb.Workload) {
				w.Uid, w.Ips, w.ServiceAccount, w.Ready, w.Node, w.Locality = "east//Pod/shop/a", []string{"10.0.0.1"}, "default", false, "gone", nil
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := normalize.Workload(inputs(nodeA), normalize.Options{ClusterID: "east"}, normalize.PodOf(tt.pod))
			if err != nil {
				t.Fatalf("Workload() error: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Workload() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGateways(t *testing.T) {
	gw := func(name, network string, ports []int32, edit ...func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: meta("istio-system", name, map[string]string{normalize.LabelNetwork: network}),
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
				Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}},
			}},
		}
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: p})
		}
		if network == "" {
			s.Labels = nil
		}
		for _, e := range edit {
			e(s)
		}
		return s
	}
	tls, hbone := pb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, pb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE
	inNamespace := func(ns string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Namespace = ns }
	}
	tests := []struct {
		name string
		opts normalize.Options
		svcs []*corev1.Service
		want []*pb.Gateway
	}{
		{
			name: "mTLS port",
			svcs: []*corev1.Service{gw("eastwest", "net1", []int32{15021, 15443})},
			want: []*pb.Gateway{{Address: "203.0.113.1", Port: 15443, Protocol: tls, Network: "net1", Service: "istio-system/eastwest"}},
		},
		{
			name: "HBONE port",
			svcs: []*corev1.Service{gw("eastwest", "net1", []int32{15008})},
			want: []*pb.Gateway{{Address: "203.0.113.1", Port: 15008, Protocol: hbone, Network: "net1", Service: "istio-system/eastwest"}},
		},
		{
			name: "both ports, LB hostname, then external IPs",
			svcs: []*corev1.Service{gw("eastwest", "net1", []int32{15443, 15008}, func(s *corev1.Service) {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "gw.example.com"}}
				s.Spec.ExternalIPs = []string{"198.51.100.7"}
			})},
			want: []*pb.Gateway{
				{Address: "198.51.100.7", Port: 15008, Protocol: hbone, Network: "net1", Service: "istio-system/eastwest"},
				{Address: "198.51.100.7", Port: 15443, Protocol: tls, Network: "net1", Service: "istio-system/eastwest"},
				{Address: "gw.example.com", Port: 15008, Protocol: hbone, Network: "net1", Service: "istio-system/eastwest"},
				{Address: "gw.example.com", Port: 15443, Protocol: tls, Network: "net1", Service: "istio-system/eastwest"},
			},
		},
		{
			name: "LB IP preferred over its hostname",
			svcs: []*corev1.Service{gw("eastwest", "net1", []int32{15443}, func(s *corev1.Service) {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9", Hostname: "gw.example.com"}}
			})},
			want: []*pb.Gateway{{Address: "203.0.113.9", Port: 15443, Protocol: tls, Network: "net1", Service: "istio-system/eastwest"}},
		},
		{
			name: "gatewayPort label overrides the mTLS port",
			svcs: []*corev1.Service{gw("eastwest", "net1", []int32{16443, 15008}, func(s *corev1.Service) {
				s.Labels[normalize.LabelGatewayPort] = "16443"
			})},
			want: []*pb.Gateway{
				{Address: "203.0.113.1", Port: 15008, Protocol: hbone, Network: "net1", Service: "istio-system/eastwest"},
				{Address: "203.0.113.1", Port: 16443, Protocol: tls, Network: "net1", Service: "istio-system/eastwest"},
			},
		},
		{
			name: "gatewayPort annotation, label first",
			svcs: []*corev1.Service{
				gw("by-annotation", "net1", nil, func(s *corev1.Service) {
					s.Annotations = map[string]string{normalize.LabelGatewayPort: "16443"}
				}),
				gw("by-label", "net1", nil, func(s *corev1.Service) {
					s.Labels[normalize.LabelGatewayPort] = "17443"
					s.Annotations = map[string]string{normalize.LabelGatewayPort: "16443"}
				}),
			},
			want: []*pb.Gateway{
				{Address: "203.0.113.1", Port: 16443, Protocol: tls, Network: "net1", Service: "istio-system/by-annotation"},
				{Address: "203.0.113.1", Port: 17443, Protocol: tls, Network: "net1", Service: "istio-system/by-label"},
			},
		},
		{
			name: "gatewayPort 15008 is HBONE",
			svcs: []*corev1.Service{gw("eastwest", "net1", []int32{15443, 15008}, func(s *corev1.Service) {
				s.Labels[normalize.LabelGatewayPort] = "15008"
			})},
			want: []*pb.Gateway{{Address: "203.0.113.1", Port: 15008, Protocol: hbone, Network: "net1", Service: "istio-system/eastwest"}},
		},
		{
			name: "invalid gatewayPort ignored",
			svcs: []*corev1.Service{gw("eastwest", "net1", []int32{15443}, func(s *corev1.Service) {
				s.Labels[normalize.LabelGatewayPort] = "http"
			})},
			want: []*pb.Gateway{{Address: "203.0.113.1", Port: 15443, Protocol: tls, Network: "net1", Service: "istio-system/eastwest"}},
		},
		{
			name: "not gateways: no network label, no gateway port, no address",
			svcs: []*corev1.Service{
				gw("unlabelled", "", []int32{15443}),
				gw("web", "net1", []int32{443}),
				gw("pending", "net1", []int32{15443}, func(s *corev1.Service) { s.Status = corev1.ServiceStatus{} }),
			},
		},
		{
			name: "a namespace user's Service outside the gateway namespaces is no gateway",
			svcs: []*corev1.Service{gw("hijack", "net2", []int32{15443, 15008}, inNamespace("team-a"))},
		},
		{
			name: "gateway namespaces replace the system namespace",
			opts: normalize.Options{GatewayNamespaces: []string{"gateways", "gateways", "team-b"}},
			svcs: []*corev1.Service{
				gw("eastwest", "net1", []int32{15443}),
				gw("a", "net1", []int32{15443}, inNamespace("gateways")),
				gw("b", "net1", []int32{15443}, inNamespace("team-b")),
				gw("c", "net1", []int32{15443}, inNamespace("team-c")),
			},
			want: []*pb.Gateway{
				{Address: "203.0.113.1", Port: 15443, Protocol: tls, Network: "net1", Service: "gateways/a"},
				{Address: "203.0.113.1", Port: 15443, Protocol: tls, Network: "net1", Service: "team-b/b"},
			},
		},
		{
			name: "sorted by network, then service",
			svcs: []*corev1.Service{gw("b", "net2", []int32{15443}), gw("c", "net1", []int32{15443}), gw("a", "net2", []int32{15443})},
			want: []*pb.Gateway{
				{Address: "203.0.113.1", Port: 15443, Protocol: tls, Network: "net1", Service: "istio-system/c"},
				{Address: "203.0.113.1", Port: 15443, Protocol: tls, Network: "net2", Service: "istio-system/a"},
				{Address: "203.0.113.1", Port: 15443, Protocol: tls, Network: "net2", Service: "istio-system/b"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []metav1.Object
			for _, s := range tt.svcs {
				objs = append(objs, s)
			}
			got := normalize.Gateways(inputs(objs...), tt.opts)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Gateways() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
