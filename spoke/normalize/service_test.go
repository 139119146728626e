package normalize_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	pb "github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
)

var (
	t1 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t2 = t1.Add(time.Hour)
)

func meta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
}

// service returns a ClusterIP Service created at t2 with one port.
func service(ns, name string, edit ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: meta(ns, name, nil),
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	s.CreationTimestamp = metav1.NewTime(t2)
	for _, e := range edit {
		e(s)
	}
	return s
}

func serviceExport(ns, name string) *mcsv1beta1.ServiceExport {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: meta(ns, name, nil)}
	se.CreationTimestamp = metav1.NewTime(t1)
	return se
}

func labelled(labels map[string]string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Labels = labels }
}

// pbService is what service(ns, name) becomes when exported.
func pbService(ns, name string, source pb.ExportSource, at time.Time, edit ...func(*pb.Service)) *pb.Service {
	s := &pb.Service{
		Namespace:  ns,
		Name:       name,
		Hostname:   name + "." + ns + ".svc.cluster.local",
		Ports:      []*pb.ServicePort{{Name: "http", Protocol: pb.Protocol_PROTOCOL_TCP, Port: 80, TargetPort: 8080}},
		Type:       pb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		ClusterIps: []string{"10.96.0.10"},
		Export:     &pb.Export{Source: source, Time: timestamppb.New(at)},
	}
	for _, e := range edit {
		e(s)
	}
	return s
}

func TestService(t *testing.T) {
	byExport := pb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT
	byLabel := pb.ExportSource_EXPORT_SOURCE_LABEL
	byAll := pb.ExportSource_EXPORT_SOURCE_ALL
	exportLabel := map[string]string{normalize.LabelExport: "true"}
	all := normalize.Options{Export: normalize.ExportAll}

	tests := []struct {
		name       string
		in         *fakeInputs
		opts       normalize.Options
		ns, svc    string
		want       *pb.Service
		wantStatus normalize.ExportStatus
	}{
		{
			name:       "exported by ServiceExport at its creation time",
			in:         inputs(service("shop", "cart"), serviceExport("shop", "cart")),
			ns:         "shop",
			svc:        "cart",
			want:       pbService("shop", "cart", byExport, t1),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name: "what an MCS import copies: session affinity, traffic policy and distribution, IP families, exported labels and annotations",
			in: inputs(service("shop", "cart", func(s *corev1.Service) {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				s.Spec.TrafficDistribution = ptr.To("PreferClose")
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
				s.Labels = map[string]string{"not": "exported"} // the Service's own labels never travel
			}), func() *mcsv1beta1.ServiceExport {
				se := serviceExport("shop", "cart")
				se.Spec.ExportedLabels = map[string]string{"tier": "web", "app": "cart"}
				se.Spec.ExportedAnnotations = map[string]string{"owner": "team-a"}
				return se
			}()),
			ns:  "shop",
			svc: "cart",
			want: pbService("shop", "cart", byExport, t1, func(s *pb.Service) {
				s.SessionAffinity, s.SessionAffinityTimeoutSeconds = pb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP, 600
				s.InternalTrafficPolicy, s.TrafficDistribution = "Local", "PreferClose"
				s.IpFamilies = []pb.IPFamily{pb.IPFamily_IP_FAMILY_IPV4, pb.IPFamily_IP_FAMILY_IPV6}
				s.Export.Labels = []*pb.KeyValue{{Key: "app", Value: "cart"}, {Key: "tier", Value: "web"}}
				s.Export.Annotations = []*pb.KeyValue{{Key: "owner", Value: "team-a"}}
			}),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name:       "ServiceExport wins over label and policy all",
			in:         inputs(service("shop", "cart", labelled(exportLabel)), serviceExport("shop", "cart")),
			opts:       all,
			ns:         "shop",
			svc:        "cart",
			want:       pbService("shop", "cart", byExport, t1),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name:       "exported by label at the Service's creation time",
			in:         inputs(service("shop", "cart", labelled(exportLabel))),
			ns:         "shop",
			svc:        "cart",
			want:       pbService("shop", "cart", byLabel, t2),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name:       "exported by policy all",
			in:         inputs(service("shop", "cart")),
			opts:       all,
			ns:         "shop",
			svc:        "cart",
			want:       pbService("shop", "cart", byAll, t2),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name: "policy all: opted out by label",
			in:   inputs(service("shop", "cart", labelled(map[string]string{normalize.LabelExport: "false"}))),
			opts: all,
			ns:   "shop",
			svc:  "cart",
		},
		{
			name: "policy all: the API server's service stays home",
			in:   inputs(service("default", "kubernetes")),
			opts: all,
			ns:   "default",
			svc:  "kubernetes",
		},
		{
			name: "policy all: kube-system stays home",
			in:   inputs(service("kube-system", "kube-dns")),
			opts: all,
			ns:   "kube-system",
			svc:  "kube-dns",
		},
		{
			name: "not exported",
			in:   inputs(service("shop", "cart"), serviceExport("shop", "other")),
			ns:   "shop",
			svc:  "cart",
		},
		{
			name: "label value other than true does not export",
			in:   inputs(service("shop", "cart", labelled(map[string]string{normalize.LabelExport: "yes"}))),
			ns:   "shop",
			svc:  "cart",
		},
		{
			name: "ServiceExport being deleted does not export",
			in: inputs(service("shop", "cart"), func() *mcsv1beta1.ServiceExport {
				se := serviceExport("shop", "cart")
				se.DeletionTimestamp = &metav1.Time{Time: t2}
				return se
			}()),
			ns:  "shop",
			svc: "cart",
		},
		{
			name: "ExternalName with ServiceExport is InvalidServiceType",
			in: inputs(serviceExport("shop", "cart"), service("shop", "cart", func(s *corev1.Service) {
				s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "cart.example.com"}
			})),
			ns:  "shop",
			svc: "cart",
			wantStatus: normalize.ExportStatus{
				Reason:  normalize.ReasonInvalidServiceType,
				Message: "service shop/cart is of type ExternalName, which cannot be exported",
			},
		},
		{
			name: "ExternalName under policy all is silently skipped",
			in: inputs(service("shop", "cart", func(s *corev1.Service) {
				s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "cart.example.com"}
			})),
			opts: all,
			ns:   "shop",
			svc:  "cart",
		},
		{
			name: "ServiceExport without Service is NoService",
			in:   inputs(serviceExport("shop", "cart")),
			ns:   "shop",
			svc:  "cart",
			wantStatus: normalize.ExportStatus{
				Reason:  normalize.ReasonNoService,
				Message: "service shop/cart does not exist",
			},
		},
		{
			name: "neither Service nor ServiceExport",
			in:   inputs(),
			opts: all,
			ns:   "shop",
			svc:  "cart",
		},
		{
			name: "headless",
			in: inputs(serviceExport("shop", "db"), service("shop", "db", func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
			})),
			ns:  "shop",
			svc: "db",
			want: pbService("shop", "db", byExport, t1, func(s *pb.Service) {
				s.Type, s.ClusterIps = pb.ServiceType_SERVICE_TYPE_HEADLESS, nil
			}),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name: "dual-stack NodePort",
			in: inputs(serviceExport("shop", "cart"), service("shop", "cart", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:0:0::a"}
			})),
			ns:  "shop",
			svc: "cart",
			want: pbService("shop", "cart", byExport, t1, func(s *pb.Service) {
				s.Type, s.ClusterIps = pb.ServiceType_SERVICE_TYPE_NODE_PORT, []string{"10.96.0.10", "fd00::a"}
			}),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name: "LoadBalancer with only spec.clusterIP, in a custom domain",
			in: inputs(serviceExport("shop", "cart"), service("shop", "cart", func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ClusterIPs = corev1.ServiceTypeLoadBalancer, nil
			})),
			opts: normalize.Options{DomainSuffix: "example.internal"},
			ns:   "shop",
			svc:  "cart",
			want: pbService("shop", "cart", byExport, t1, func(s *pb.Service) {
				s.Type, s.Hostname = pb.ServiceType_SERVICE_TYPE_LOAD_BALANCER, "cart.shop.svc.example.internal"
			}),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name: "ports: named, numeric, quoted numeric, unset targets, defaults",
			in: inputs(serviceExport("shop", "cart"), service("shop", "cart", func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), AppProtocol: ptr.To("http")},
					{Name: "grpc", Protocol: corev1.ProtocolUDP, Port: 9090, TargetPort: intstr.FromInt32(9091)},
					{Name: "quoted", Protocol: corev1.ProtocolSCTP, Port: 7000, TargetPort: intstr.FromString("7001")},
					{Name: "https", Port: 443},
				}
			})),
			ns:  "shop",
			svc: "cart",
			want: pbService("shop", "cart", byExport, t1, func(s *pb.Service) {
				s.Ports = []*pb.ServicePort{
					{Name: "http", Protocol: pb.Protocol_PROTOCOL_TCP, AppProtocol: "http", Port: 80, TargetPortName: "web"},
					{Name: "grpc", Protocol: pb.Protocol_PROTOCOL_UDP, Port: 9090, TargetPort: 9091},
					{Name: "quoted", Protocol: pb.Protocol_PROTOCOL_SCTP, Port: 7000, TargetPort: 7001},
					{Name: "https", Protocol: pb.Protocol_PROTOCOL_TCP, Port: 443, TargetPort: 443},
				}
			}),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
		{
			name: "no ports, no creation time",
			in: inputs(func() *mcsv1beta1.ServiceExport {
				se := serviceExport("shop", "cart")
				se.CreationTimestamp = metav1.Time{}
				return se
			}(), service("shop", "cart", func(s *corev1.Service) { s.Spec.Ports = nil })),
			ns:  "shop",
			svc: "cart",
			want: pbService("shop", "cart", byExport, t1, func(s *pb.Service) {
				s.Ports = nil
				s.Export.Time = nil
			}),
			wantStatus: normalize.ExportStatus{Exported: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, status, err := normalize.Service(tt.in, tt.opts, tt.ns, tt.svc)
			if err != nil {
				t.Fatalf("Service() error: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Service() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStatus, status); diff != "" {
				t.Errorf("Service() status mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	got := normalize.Options{ClusterID: "east"}.WithDefaults()
	want := normalize.Options{
		ClusterID: "east", TrustDomain: "cluster.local", DomainSuffix: "cluster.local",
		SystemNamespace: "istio-system", GatewayNamespaces: []string{"istio-system"}, Export: normalize.ExportExported,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WithDefaults() mismatch (-want +got):\n%s", diff)
	}

	tests := []struct {
		name    string
		opts    normalize.Options
		wantErr bool
	}{
		{name: "defaults", opts: normalize.Options{ClusterID: "east"}},
		{name: "all", opts: normalize.Options{ClusterID: "east", Export: normalize.ExportAll}},
		{name: "unknown policy", opts: normalize.Options{ClusterID: "east", Export: "some"}, wantErr: true},
		{name: "no cluster", opts: normalize.Options{}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, normalize.ErrInvalidOptions)) {
				t.Errorf("Validate() = %v, want error %v wrapping ErrInvalidOptions", err, tt.wantErr)
			}
		})
	}
}
