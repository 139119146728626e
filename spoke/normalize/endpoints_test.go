package normalize_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	pb "github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
)

func slice(name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  meta("shop", name, map[string]string{discoveryv1.LabelServiceName: "cart"}),
		AddressType: family,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func httpPort(port int32) []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}}
}

func podEndpoint(addr, pod string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses: []string{addr},
		NodeName:  ptr.To("node-a"),
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: pod, UID: types.UID("uid-" + pod)},
	}
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

var (
	nodeA = node("node-a", map[string]string{
		normalize.LabelRegion: "eu-west1", normalize.LabelZone: "eu-west1-b", normalize.LabelSubzone: "rack7",
	})
	localityA = &pb.Locality{Region: "eu-west1", Zone: "eu-west1-b", Subzone: "rack7"}
	pbHTTP    = []*pb.EndpointPort{{Name: "http", Protocol: pb.Protocol_PROTOCOL_TCP, Port: 8080}}
)

// pbEndpoint is what podEndpoint(addr, pod) becomes with nodeA known.
func pbEndpoint(addr, pod string, edit ...func(*pb.Endpoint)) *pb.Endpoint {
	ep := &pb.Endpoint{
		Namespace: "shop",
		Service:   "cart",
		Address:   addr,
		Ports:     pbHTTP,
		Ready:     true,
		Serving:   true,
		Node:      "node-a",
		Locality:  localityA,
		Workload:  &pb.WorkloadRef{Kind: "Pod", Name: pod, Uid: "uid-" + pod},
		Plaintext: true, // no pod known
	}
	for _, e := range edit {
		e(ep)
	}
	return ep
}

func TestEndpoints(t *testing.T) {
	cart := &pb.Service{Namespace: "shop", Name: "cart"}
	tests := []struct {
		name string
		in   *fakeInputs
		svc  *pb.Service
		want []*pb.Endpoint
	}{
		{
			name: "no service",
			in:   inputs(nodeA),
		},
		{
			name: "no slices",
			in:   inputs(nodeA),
			svc:  cart,
			want: []*pb.Endpoint{},
		},
		{
			name: "sorted numerically by address, hostname kept",
			in: inputs(nodeA, slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080),
				podEndpoint("10.0.0.10", "b"),
				func() discoveryv1.Endpoint { e := podEndpoint("10.0.0.9", "a"); e.Hostname = ptr.To("a"); return e }(),
			)),
			svc: cart,
			want: []*pb.Endpoint{
				pbEndpoint("10.0.0.9", "a", func(e *pb.Endpoint) { e.Hostname = "a" }),
				pbEndpoint("10.0.0.10", "b"),
			},
		},
		{
			name: "conditions with Kubernetes defaults",
			in: inputs(nodeA, slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080),
				func() discoveryv1.Endpoint {
					e := podEndpoint("10.0.0.1", "not-ready")
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false)}
					return e
				}(),
				func() discoveryv1.Endpoint {
					e := podEndpoint("10.0.0.2", "terminating")
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
					return e
				}(),
			)),
			svc: cart,
			want: []*pb.Endpoint{
				pbEndpoint("10.0.0.1", "not-ready", func(e *pb.Endpoint) { e.Ready, e.Serving = false, false }),
				pbEndpoint("10.0.0.2", "terminating", func(e *pb.Endpoint) { e.Ready, e.Terminating = false, true }),
			},
		},
		{
			name: "duplicate address across slices merges",
			in: inputs(nodeA,
				slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), func() discoveryv1.Endpoint {
					e := podEndpoint("10.0.0.1", "a")
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}
					return e
				}()),
				slice("cart-2", discoveryv1.AddressTypeIPv4,
					[]discoveryv1.EndpointPort{{Name: ptr.To("admin"), Port: ptr.To[int32](9000), AppProtocol: ptr.To("http")}, {Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
					podEndpoint("10.0.0.1", "a")),
			),
			svc: cart,
			want: []*pb.Endpoint{pbEndpoint("10.0.0.1", "a", func(e *pb.Endpoint) {
				e.Ports = []*pb.EndpointPort{
					{Name: "admin", Protocol: pb.Protocol_PROTOCOL_TCP, AppProtocol: "http", Port: 9000},
					{Name: "http", Protocol: pb.Protocol_PROTOCOL_TCP, Port: 8080},
				}
			})},
		},
		{
			name: "terminating only if every copy is",
			in: inputs(nodeA,
				slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), func() discoveryv1.Endpoint {
					e := podEndpoint("10.0.0.1", "a")
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
					return e
				}()),
				slice("cart-2", discoveryv1.AddressTypeIPv4, httpPort(8080), func() discoveryv1.Endpoint {
					e := podEndpoint("10.0.0.1", "a")
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
					return e
				}()),
			),
			svc:  cart,
			want: []*pb.Endpoint{pbEndpoint("10.0.0.1", "a", func(e *pb.Endpoint) { e.Ready, e.Terminating = false, true })},
		},
		{
			name: "dual-stack: one endpoint per family, IPv6 canonicalised; FQDN and imported slices skipped",
			in: inputs(nodeA,
				slice("cart-v6", discoveryv1.AddressTypeIPv6, httpPort(8080), podEndpoint("fd00:0::1", "a")),
				slice("cart-v4", discoveryv1.AddressTypeIPv4, httpPort(8080), podEndpoint("10.0.0.1", "a")),
				slice("cart-fqdn", discoveryv1.AddressTypeFQDN, httpPort(8080), discoveryv1.Endpoint{Addresses: []string{"cart.example.com"}}),
				func() *discoveryv1.EndpointSlice {
					s := slice("cart-imported", discoveryv1.AddressTypeIPv4, httpPort(8080), podEndpoint("10.9.0.1", "remote"))
					s.Labels[normalize.LabelSourceCluster] = "west"
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := slice("cart-local-copy", discoveryv1.AddressTypeIPv4, httpPort(8080), podEndpoint("10.0.0.2", "b"))
					s.Labels[normalize.LabelSourceCluster] = "east"
					return s
				}(),
			),
			svc:  cart,
			want: []*pb.Endpoint{pbEndpoint("10.0.0.1", "a"), pbEndpoint("10.0.0.2", "b"), pbEndpoint("fd00::1", "a")},
		},
		{
			name: "ports without number skipped, defaults filled; no target, unknown node uses endpoint zone; a bad slice left out",
			in: inputs(slice("cart-1", discoveryv1.AddressTypeIPv4,
				[]discoveryv1.EndpointPort{{Name: ptr.To("all")}, {Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)}, {Port: ptr.To[int32](8080)}},
				discoveryv1.Endpoint{Addresses: []string{"192.168.1.1"}, NodeName: ptr.To("gone"), Zone: ptr.To("z1")},
			), slice("cart-2", discoveryv1.AddressTypeIPv4, httpPort(8080),
				discoveryv1.Endpoint{Addresses: []string{"192.168.1.2"}},
				discoveryv1.Endpoint{Addresses: []string{"not-an-ip"}},
			)),
			svc: cart,
			want: []*pb.Endpoint{{
				Namespace: "shop", Service: "cart", Address: "192.168.1.1",
				Ports: []*pb.EndpointPort{
					{Protocol: pb.Protocol_PROTOCOL_UDP, Port: 53},
					{Protocol: pb.Protocol_PROTOCOL_TCP, Port: 8080},
				},
				Ready: true, Serving: true, Node: "gone", Locality: &pb.Locality{Zone: "z1"}, Plaintext: true,
			}},
		},
		{
			name: "workload uid from the Pod when the targetRef has none; other kinds kept as is",
			in: inputs(nodeA,
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", UID: "pod-uid"}},
				slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080),
					func() discoveryv1.Endpoint { e := podEndpoint("10.0.0.1", "a"); e.TargetRef.UID = ""; return e }(),
					func() discoveryv1.Endpoint { e := podEndpoint("10.0.0.2", "b"); e.TargetRef.UID = ""; return e }(),
					func() discoveryv1.Endpoint {
						e := podEndpoint("10.0.0.3", "vm")
						e.TargetRef = &corev1.ObjectReference{Kind: "WorkloadEntry", Name: "vm", UID: "we-uid"}
						return e
					}(),
				)),
			svc: cart,
			want: []*pb.Endpoint{
				pbEndpoint("10.0.0.1", "a", func(e *pb.Endpoint) { e.Workload.Uid = "pod-uid" }),
				pbEndpoint("10.0.0.2", "b", func(e *pb.Endpoint) { e.Workload.Uid = "" }),
				pbEndpoint("10.0.0.3", "vm", func(e *pb.Endpoint) { e.Workload = &pb.WorkloadRef{Kind: "WorkloadEntry", Name: "vm", Uid: "we-uid"} }),
			},
		},
		{
			name: "mesh TLS from the pod: injected or ambient; a plain pod, an unknown one or no pod takes plaintext",
			in: inputs(nodeA,
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "injected", UID: "uid-injected", Labels: map[string]string{normalize.LabelTLSMode: "istio"}}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ambient", UID: "uid-ambient", Annotations: map[string]string{normalize.AnnotationAmbientRedirection: "enabled"}}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "disabled", UID: "uid-disabled", Labels: map[string]string{normalize.LabelTLSMode: "disabled"}}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "plain", UID: "uid-plain"}},
				slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080),
					podEndpoint("10.0.0.1", "injected"), podEndpoint("10.0.0.2", "ambient"), podEndpoint("10.0.0.3", "disabled"),
					podEndpoint("10.0.0.4", "plain"), podEndpoint("10.0.0.5", "unknown"),
				)),
			svc: cart,
			want: []*pb.Endpoint{
				pbEndpoint("10.0.0.1", "injected", func(e *pb.Endpoint) { e.Plaintext = false }),
				pbEndpoint("10.0.0.2", "ambient", func(e *pb.Endpoint) { e.Plaintext = false }),
				pbEndpoint("10.0.0.3", "disabled"),
				pbEndpoint("10.0.0.4", "plain"),
				pbEndpoint("10.0.0.5", "unknown"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rejected := normalize.Endpoints(tt.in, normalize.Options{ClusterID: "east"}, tt.svc)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Endpoints() mismatch (-want +got):\n%s", diff)
			}
			var names []string
			for _, r := range rejected {
				names = append(names, r.Name)
			}
			if strings.HasSuffix(tt.name, "a bad slice left out") != (len(names) == 1 && names[0] == "cart-2") || len(names) > 1 {
				t.Errorf("Endpoints() rejected %v", rejected)
			}
		})
	}
}

// TestNetwork checks the precedence of network sources: pod label >
// namespace label > system namespace label > --network flag, with the
// override left empty when it equals the cluster's network.
func TestNetwork(t *testing.T) {
	net := func(n string) map[string]string {
		if n == "" {
			return nil
		}
		return map[string]string{normalize.LabelNetwork: n}
	}
	tests := []struct {
		name                      string
		flag, system, ns, pod     string
		wantCluster, wantOverride string
	}{
		{name: "flag only", flag: "flag-net", wantCluster: "flag-net"},
		{name: "system namespace over flag", flag: "flag-net", system: "sys-net", wantCluster: "sys-net"},
		{name: "namespace over cluster", flag: "flag-net", system: "sys-net", ns: "ns-net", wantCluster: "sys-net", wantOverride: "ns-net"},
		{name: "pod over namespace", flag: "flag-net", system: "sys-net", ns: "ns-net", pod: "pod-net", wantCluster: "sys-net", wantOverride: "pod-net"},
		{name: "pod over flag", flag: "flag-net", pod: "pod-net", wantCluster: "flag-net", wantOverride: "pod-net"},
		{name: "same as cluster is no override", system: "sys-net", pod: "sys-net", wantCluster: "sys-net"},
		{name: "nothing", wantCluster: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := normalize.Options{ClusterID: "east", Network: tt.flag}
			pod := &corev1.Pod{
				ObjectMeta: meta("shop", "a", net(tt.pod)),
				Status:     corev1.PodStatus{PodIP: "10.0.0.1"},
			}
			in := inputs(
				namespace("istio-system", net(tt.system)),
				namespace("shop", net(tt.ns)),
				pod,
				slice("cart-1", discoveryv1.AddressTypeIPv4, nil, podEndpoint("10.0.0.1", "a")),
			)
			if got := normalize.ClusterNetwork(in, opts); got != tt.wantCluster {
				t.Errorf("ClusterNetwork() = %q, want %q", got, tt.wantCluster)
			}
			eps, _ := normalize.Endpoints(in, opts, &pb.Service{Namespace: "shop", Name: "cart"})
			if len(eps) != 1 || eps[0].GetNetwork() != tt.wantOverride {
				t.Errorf("Endpoints() = %v, want one endpoint on network %q", eps, tt.wantOverride)
			}
			if w, err := normalize.Workload(in, opts, normalize.PodOf(pod)); err != nil || w.GetNetwork() != tt.wantOverride {
				t.Errorf("Workload().Network = %q, %v, want %q", w.GetNetwork(), err, tt.wantOverride)
			}
		})
	}

	t.Run("namespace label applies to an endpoint whose pod is unknown", func(t *testing.T) {
		in := inputs(namespace("shop", net("ns-net")),
			slice("cart-1", discoveryv1.AddressTypeIPv4, nil, podEndpoint("10.0.0.1", "unknown")))
		eps, _ := normalize.Endpoints(in, normalize.Options{Network: "flag-net"}, &pb.Service{Namespace: "shop", Name: "cart"})
		if len(eps) != 1 || eps[0].GetNetwork() != "ns-net" {
			t.Errorf("Endpoints() = %v, want one endpoint on network ns-net", eps)
		}
	})
}
