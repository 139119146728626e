package normalize_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	pb "github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
)

// ignoreMessage compares rejections on what they name, not their prose.
var ignoreMessage = cmpopts.IgnoreFields(normalize.Rejection{}, "Message")

func rejection(kind normalize.Kind, name, field, value string, reason normalize.RejectReason) *normalize.Rejection {
	r := &normalize.Rejection{Kind: kind, Namespace: "shop", Name: name, Field: field, Value: value, Reason: reason}
	if kind != normalize.KindPod {
		r.Service = "shop/cart"
	}
	return r
}

func TestServiceRejections(t *testing.T) {
	svc := func(edit func(*corev1.Service)) *corev1.Service { return service("shop", "cart", edit) }
	manyPorts := make([]corev1.ServicePort, 300)
	for i := range manyPorts {
		manyPorts[i] = corev1.ServicePort{Name: "p" + strconv.Itoa(i), Port: int32(1000 + i)}
	}
	tests := []struct {
		name string
		svc  *corev1.Service
		want *normalize.Rejection
	}{
		{
			name: "port out of range",
			svc:  svc(func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 }),
			want: rejection(normalize.KindService, "cart", "spec.ports[0].port", "70000", normalize.RejectInvalidPort),
		},
		{
			name: "target port out of range",
			svc:  svc(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(-1) }),
			want: rejection(normalize.KindService, "cart", "spec.ports[0].targetPort", "-1", normalize.RejectInvalidPort),
		},
		{
			name: "quoted target port out of range",
			svc:  svc(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("70000") }),
			want: rejection(normalize.KindService, "cart", "spec.ports[0].targetPort", "70000", normalize.RejectInvalidPort),
		},
		{
			name: "cluster IP that is not one",
			svc:  svc(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.10", "999.1.1.1"} }),
			want: rejection(normalize.KindService, "cart", "spec.clusterIPs[1]", "999.1.1.1", normalize.RejectInvalidAddress),
		},
		{
			name: "too many ports (an API server admits 300)",
			svc:  svc(func(s *corev1.Service) { s.Spec.Ports = manyPorts }),
			want: rejection(normalize.KindService, "cart", "spec.ports", "300", normalize.RejectTooManyPorts),
		},
		{
			name: "appProtocol not UTF-8",
			svc:  svc(func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = ptr.To("h\xff2") }),
			want: rejection(normalize.KindService, "cart", "spec.ports[0].appProtocol", "h\xff2", normalize.RejectInvalidUTF8),
		},
		{
			name: "what the federation refuses: a duplicate port name",
			svc: svc(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "http", Port: 81})
			}),
			want: rejection(normalize.KindService, "cart", "spec.ports[1].name", "http", normalize.RejectInvalid),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, status, err := normalize.Service(inputs(tt.svc, serviceExport("shop", "cart")), normalize.Options{}, "shop", "cart")
			if got != nil || status.Exported || status.Reason != normalize.ReasonRejected || status.Message == "" {
				t.Errorf("Service() = %v, %+v, want nil and a rejected status", got, status)
			}
			if !errors.Is(err, normalize.ErrRejected) {
				t.Fatalf("Service() error %v, want a rejection", err)
			}
			if diff := cmp.Diff(tt.want, normalize.AsRejection(err), ignoreMessage); diff != "" {
				t.Errorf("rejection (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("a Service nobody exports is not checked", func(t *testing.T) {
		bad := svc(func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 })
		if got, status, err := normalize.Service(inputs(bad), normalize.Options{}, "shop", "cart"); got != nil || status != (normalize.ExportStatus{}) || err != nil {
			t.Errorf("Service() = %v, %+v, %v; want nothing", got, status, err)
		}
	})
	t.Run("headless: None is no address", func(t *testing.T) {
		headless := svc(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} })
		if _, _, err := normalize.Service(inputs(headless, serviceExport("shop", "cart")), normalize.Options{}, "shop", "cart"); err != nil {
			t.Errorf("Service() error %v", err)
		}
	})
}

func TestEndpointSliceRejections(t *testing.T) {
	cart := &pb.Service{Namespace: "shop", Name: "cart"}
	good := podEndpoint("10.0.0.1", "a")
	with := func(edit func(*discoveryv1.Endpoint)) discoveryv1.Endpoint {
		e := podEndpoint("10.0.0.2", "b")
		edit(&e)
		return e
	}
	many := make([]discoveryv1.Endpoint, normalize.MaxEndpointsPerSlice+1)
	for i := range many {
		many[i] = podEndpoint("10.1."+strconv.Itoa(i/250)+"."+strconv.Itoa(1+i%250), "p"+strconv.Itoa(i))
	}
	manyPorts := func(from int32) []discoveryv1.EndpointPort {
		out := make([]discoveryv1.EndpointPort, 200)
		for i := range out {
			out[i] = discoveryv1.EndpointPort{Name: ptr.To("p" + strconv.Itoa(int(from)+i)), Port: ptr.To(from + int32(i))}
		}
		return out
	}
	tests := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   *normalize.Rejection
	}{
		{
			name:   "address that is not one",
			slices: []*discoveryv1.EndpointSlice{slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), good, with(func(e *discoveryv1.Endpoint) { e.Addresses = []string{"999.1.1.1"} }))},
			want:   rejection(normalize.KindEndpointSlice, "cart-1", "endpoints[1].addresses[0]", "999.1.1.1", normalize.RejectInvalidAddress),
		},
		{
			name:   "no address",
			slices: []*discoveryv1.EndpointSlice{slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), with(func(e *discoveryv1.Endpoint) { e.Addresses = nil }))},
			want:   rejection(normalize.KindEndpointSlice, "cart-1", "endpoints[0].addresses[0]", "", normalize.RejectInvalidAddress),
		},
		{
			name:   "unspecified address",
			slices: []*discoveryv1.EndpointSlice{slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), with(func(e *discoveryv1.Endpoint) { e.Addresses = []string{"0.0.0.0"} }))},
			want:   rejection(normalize.KindEndpointSlice, "cart-1", "endpoints[0].addresses[0]", "0.0.0.0", normalize.RejectInvalidAddress),
		},
		{
			name:   "port out of range (an API server admits it)",
			slices: []*discoveryv1.EndpointSlice{slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(70000), good)},
			want:   rejection(normalize.KindEndpointSlice, "cart-1", "ports[0].port", "70000", normalize.RejectInvalidPort),
		},
		{
			name:   "too many endpoints",
			slices: []*discoveryv1.EndpointSlice{slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), many...)},
			want:   rejection(normalize.KindEndpointSlice, "cart-1", "endpoints", "1001", normalize.RejectTooManyEndpoints),
		},
		{
			name:   "targetRef name not UTF-8 (an API server admits it)",
			slices: []*discoveryv1.EndpointSlice{slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), with(func(e *discoveryv1.Endpoint) { e.TargetRef.Name = "b\xff" }))},
			want:   rejection(normalize.KindEndpointSlice, "cart-1", "endpoints[0].targetRef.name", "b\xff", normalize.RejectInvalidUTF8),
		},
		{
			name:   "what the federation refuses: a zone that is no label value (an API server admits it)",
			slices: []*discoveryv1.EndpointSlice{slice("cart-1", discoveryv1.AddressTypeIPv4, httpPort(8080), with(func(e *discoveryv1.Endpoint) { e.NodeName, e.Zone = nil, ptr.To("zone one") }))},
			want:   rejection(normalize.KindEndpointSlice, "cart-1", "endpoints[0].locality.zone", "zone one", normalize.RejectInvalid),
		},
		{
			name: "an address whose copies have too many ports together: the later slice",
			slices: []*discoveryv1.EndpointSlice{
				slice("cart-1", discoveryv1.AddressTypeIPv4, manyPorts(1000), good),
				slice("cart-2", discoveryv1.AddressTypeIPv4, manyPorts(2000), good),
			},
			want: rejection(normalize.KindEndpointSlice, "cart-2", "endpoints[0].addresses[0]", "10.0.0.1", normalize.RejectTooManyPorts),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []metav1.Object{nodeA}
			for _, s := range tt.slices {
				objs = append(objs, s)
			}
			objs = append(objs, slice("cart-9", discoveryv1.AddressTypeIPv4, httpPort(8080), podEndpoint("10.0.0.9", "z")))
			eps, rejected := normalize.Endpoints(inputs(objs...), normalize.Options{ClusterID: "east"}, cart)
			if diff := cmp.Diff([]*normalize.Rejection{tt.want}, rejected, ignoreMessage); diff != "" {
				t.Errorf("rejections (-want +got):\n%s", diff)
			}
			// The rejected slice contributes nothing; the others are whole.
			var addrs []string
			for _, e := range eps {
				addrs = append(addrs, e.GetAddress())
			}
			want := []string{"10.0.0.9"}
			if len(tt.slices) == 2 {
				want = []string{"10.0.0.1", "10.0.0.9"}
			}
			if diff := cmp.Diff(want, addrs); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			for _, r := range rejected {
				if msg := r.Error(); !strings.Contains(msg, "EndpointSlice shop/"+r.Name+": "+r.Field) || r.Message == "" {
					t.Errorf("Error() = %q, want it to name the object and field", msg)
				}
			}
		})
	}
}

func TestPodRejections(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want *normalize.Rejection
	}{
		{
			name: "IP that is not one",
			pod:  pod("a", nil, func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "999.1.1.1"}} }),
			want: rejection(normalize.KindPod, "a", "status.podIPs[1]", "999.1.1.1", normalize.RejectInvalidAddress),
		},
		{
			name: "unspecified IP (an API server admits it)",
			pod:  pod("a", nil, func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "0.0.0.0"}} }),
			want: rejection(normalize.KindPod, "a", "status.podIPs[0]", "0.0.0.0", normalize.RejectInvalidAddress),
		},
		{
			name: "what the federation refuses: a canonical name longer than a label value",
			pod: pod("a", nil, func(p *corev1.Pod) {
				p.OwnerReferences = []metav1.OwnerReference{{Kind: "StatefulSet", Name: strings.Repeat("d", 64), Controller: ptr.To(true)}}
			}),
			want: rejection(normalize.KindPod, "a", "canonicalName", strings.Repeat("d", 64), normalize.RejectInvalid),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := normalize.Workload(inputs(nodeA), normalize.Options{ClusterID: "east"}, normalize.PodOf(tt.pod))
			if w != nil || !errors.Is(err, normalize.ErrRejected) {
				t.Fatalf("Workload() = %v, %v; want a rejection", w, err)
			}
			if diff := cmp.Diff(tt.want, normalize.AsRejection(err), ignoreMessage); diff != "" {
				t.Errorf("rejection (-want +got):\n%s", diff)
			}
		})
	}
}
