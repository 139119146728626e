package normalizetest

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// The cluster fixture is a small cluster whose objects carry what a real API
// server returns: managedFields, many labels and annotations, full Pod
// specs and statuses, Node statuses. Everything normalization reads is set
// somewhere, so that a transform dropping it changes the shard.

// Created is when every fixture object was created.
var Created = metav1.Unix(1_700_000_000, 0)

// ObjectMeta is the metadata of a fixture object, with what a real API
// server adds.
func ObjectMeta(namespace, name string, labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: namespace, Name: name,
		UID:               types.UID("uid-" + namespace + "-" + name),
		ResourceVersion:   "1",
		Generation:        1,
		CreationTimestamp: Created,
		Labels:            labels,
		Annotations:       annotations,
		Finalizers:        []string{"example.com/keep"},
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{}}}`),
		}},
	}
}

func noise(m map[string]string) map[string]string {
	out := map[string]string{"example.com/team": "payments", "helm.sh/chart": "echo-1.2.3"}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func lastApplied() map[string]string {
	return noise(map[string]string{corev1.LastAppliedConfigAnnotation: strings.Repeat(`{"big":"json"}`, 50)})
}

// Namespace is a namespace with labels.
func Namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{
		ObjectMeta: ObjectMeta("", name, noise(labels), lastApplied()),
		Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
}

// Node is a ready node in zone of us-east1.
func Node(name, zone string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: ObjectMeta("", name, noise(map[string]string{
			normalize.LabelRegion: "us-east1", normalize.LabelZone: zone, normalize.LabelSubzone: "rack-" + name,
			corev1.LabelHostname: name, corev1.LabelOSStable: "linux",
		}), lastApplied()),
		Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24", ProviderID: "gce://" + name},
		Status: corev1.NodeStatus{
			Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example.com/big/image:v1"}, SizeBytes: 1 << 30}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		},
	}
}

// Service is a Service selecting app=name.
func Service(namespace, name string, labels, annotations map[string]string, spec corev1.ServiceSpec) *corev1.Service {
	spec.Selector = map[string]string{"app": name}
	spec.SessionAffinity = corev1.ServiceAffinityNone
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	return &corev1.Service{ObjectMeta: ObjectMeta(namespace, name, noise(labels), noise(annotations)), Spec: spec}
}

// Export is the ServiceExport of namespace/name, with a condition of
// another controller.
func Export(namespace, name string) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{
		ObjectMeta: ObjectMeta(namespace, name, noise(nil), lastApplied()),
		Spec:       mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"tier": "web"}},
		Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{{
			Type: "Conflict", Status: metav1.ConditionFalse, Reason: "NoConflicts", LastTransitionTime: Created,
		}}},
	}
}

// Pod returns a running, ready pod of a ReplicaSet on nodeName.
func Pod(namespace, name, ip, nodeName string, labels, annotations map[string]string) *corev1.Pod {
	labels = noise(labels)
	labels["pod-template-hash"] = "5d8f7c9b4"
	p := &corev1.Pod{
		ObjectMeta: ObjectMeta(namespace, name, labels, noise(annotations)),
		Spec: corev1.PodSpec{
			ServiceAccountName: "echo-sa",
			NodeName:           nodeName,
			Containers: []corev1.Container{{
				Name: "echo", Image: "registry.example.com/echo:v1",
				Env:   []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("x", 500)}},
				Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8080}},
			}},
			Volumes: []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  ip,
			PodIPs: []corev1.PodIP{{IP: ip}},
			HostIP: "192.168.0.1",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: Created},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "echo", Ready: true, RestartCount: 3, ImageID: "sha256:abc"}},
		},
	}
	p.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: "example.com/v1", Kind: "Thing", Name: "other", UID: "uid-other"},
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "echo-5d8f7c9b4", UID: "uid-rs", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
	}
	return p
}

// EP is one endpoint of a Slice: its addresses, its pod and node, and
// its conditions.
type EP struct {
	ips                         []string
	pod, node                   string
	ready, serving, terminating bool
}

// Slice is an EndpointSlice of service svc, as the EndpointSlice
// controller writes it.
func Slice(namespace, name, svc string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...EP) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: ObjectMeta(namespace, name, noise(map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}), noise(map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z"})),
		AddressType: family,
		Ports:       ports,
	}
	for _, e := range eps {
		out := discoveryv1.Endpoint{
			Addresses: e.ips,
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating),
			},
			Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "us-east1-a"}}},
			DeprecatedTopology: map[string]string{"kubernetes.io/hostname": e.node},
		}
		if e.node != "" {
			out.NodeName = ptr.To(e.node)
			out.Zone = ptr.To("zone-of-" + e.node)
		}
		if e.pod != "" {
			out.TargetRef = &corev1.ObjectReference{
				Kind: "Pod", Namespace: namespace, Name: e.pod, UID: types.UID("uid-" + namespace + "-" + e.pod),
				ResourceVersion: "42", APIVersion: "v1",
			}
		}
		s.Endpoints = append(s.Endpoints, out)
	}
	return s
}

// GRPCPort is a slice's one gRPC port, 8080.
func GRPCPort() []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: ptr.To("grpc")}}
}

// Cluster returns the fixture's objects, new on every call.
func Cluster() []runtime.Object {
	grpc := []corev1.ServicePort{{
		Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc"),
		TargetPort: intstr.FromString("grpc"), NodePort: 30080,
	}}
	return []runtime.Object{
		Namespace("istio-system", map[string]string{normalize.LabelNetwork: "net-east"}),
		Namespace("demo", nil),
		Namespace("edge", map[string]string{normalize.LabelNetwork: "net-edge"}),
		Node("node-a", "us-east1-a"),
		Node("node-b", "us-east1-b"),

		// Exported by a ServiceExport, dual-stack, with a pod on another network.
		Service("demo", "echo", nil, nil, corev1.ServiceSpec{
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"}, Ports: grpc,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		}),
		Export("demo", "echo"),
		Slice("demo", "echo-v4", "echo", discoveryv1.AddressTypeIPv4, GRPCPort(),
			EP{ips: []string{"10.0.0.1", "10.0.0.99"}, pod: "echo-a", node: "node-a", ready: true, serving: true},
			EP{ips: []string{"10.0.0.2"}, pod: "echo-b", node: "node-b", serving: true, terminating: true},
			EP{ips: []string{"10.0.0.3"}, pod: "echo-c", node: "node-b", ready: true, serving: true}),
		Slice("demo", "echo-v6", "echo", discoveryv1.AddressTypeIPv6, GRPCPort(),
			EP{ips: []string{"fd00::1"}, pod: "echo-a", node: "node-a", ready: true, serving: true}),
		Pod("demo", "echo-a", "10.0.0.1", "node-a",
			map[string]string{"app": "echo", "version": "v1"},
			map[string]string{normalize.AnnotationAmbientRedirection: "enabled"}),
		Pod("demo", "echo-b", "10.0.0.2", "node-b",
			map[string]string{normalize.LabelAppName: "echo", normalize.LabelAppVersion: "v2", normalize.LabelNetwork: "net-pod"}, nil),
		Pod("demo", "echo-c", "10.0.0.3", "node-b",
			map[string]string{normalize.LabelCanonicalName: "echo-canonical", normalize.LabelCanonicalRevision: "r3"}, nil),

		// Exported by label, headless, in a namespace on its own network.
		Service("edge", "cache", map[string]string{normalize.LabelExport: "true"}, nil, corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "redis", Port: 6379, TargetPort: intstr.FromInt32(6379)}},
		}),
		Slice("edge", "cache-1", "cache", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{{Name: ptr.To("redis"), Port: ptr.To[int32](6379)}},
			EP{ips: []string{"10.0.1.1"}, pod: "cache-0", node: "node-a", ready: true, serving: true},
			EP{ips: []string{"10.0.1.2"}, node: "node-unknown", ready: true, serving: true}), // its zone is the slice's
		Pod("edge", "cache-0", "10.0.1.1", "node-a", nil, nil),

		// Not exported (but under --export=all), with a pod of its own.
		Service("demo", "db", nil, nil, corev1.ServiceSpec{ClusterIP: "10.96.0.20", Ports: grpc}),
		Slice("demo", "db-1", "db", discoveryv1.AddressTypeIPv4, GRPCPort(),
			EP{ips: []string{"10.0.0.20"}, pod: "db-0", node: "node-a", ready: true, serving: true}),
		Pod("demo", "db-0", "10.0.0.20", "node-a", map[string]string{"app": "db"}, nil),
		func() *corev1.Pod { // on the host network: no workload
			p := Pod("demo", "agent", "192.168.0.1", "node-a", map[string]string{"app": "agent"}, nil)
			p.Spec.HostNetwork = true
			return p
		}(),

		// Exports that cannot be: ExternalName, and no Service.
		Service("demo", "ext", nil, nil, corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}),
		Export("demo", "ext"),
		Export("demo", "ghost"),

		// The east-west gateway: a port override in an annotation.
		func() *corev1.Service {
			s := Service("istio-system", "eastwest", map[string]string{normalize.LabelNetwork: "net-east"},
				map[string]string{normalize.LabelGatewayPort: "15444"},
				corev1.ServiceSpec{
					Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.30", ExternalIPs: []string{"203.0.113.9"},
					Ports: []corev1.ServicePort{{Name: "tls", Port: 15443, NodePort: 31443}, {Name: "hbone", Port: 15008}},
				})
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
				{IP: "203.0.113.10", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP), Ports: []corev1.PortStatus{{Port: 15443}}},
				{Hostname: "gw.example.com"},
			}
			return s
		}(),
	}
}

// Options are the normalization options the fixture's shards are built
// with: cluster east on net-default.
var Options = normalize.Options{ClusterID: "east", Network: "net-default"}

// InputsOf returns Inputs over objs, which must be metav1.Objects.
func InputsOf[T any](objs []T) *Inputs {
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, any(o).(metav1.Object))
	}
	return NewInputs(out...)
}
