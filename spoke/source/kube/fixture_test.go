package kube

import (
	"cmp"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/shard/shardtest"
)

// The fixture is a small cluster whose objects carry what a real API
// server returns: managedFields, many labels and annotations, full Pod
// specs and statuses, Node statuses. Everything normalization reads is set
// somewhere, so that a transform dropping it changes the shard.

var created = metav1.Unix(1_700_000_000, 0)

func objMeta(namespace, name string, labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: namespace, Name: name,
		UID:               types.UID("uid-" + namespace + "-" + name),
		ResourceVersion:   "1",
		Generation:        1,
		CreationTimestamp: created,
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

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{
		ObjectMeta: objMeta("", name, noise(labels), lastApplied()),
		Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
}

func node(name, zone string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: objMeta("", name, noise(map[string]string{
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

func service(namespace, name string, labels, annotations map[string]string, spec corev1.ServiceSpec) *corev1.Service {
	spec.Selector = map[string]string{"app": name}
	spec.SessionAffinity = corev1.ServiceAffinityNone
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	return &corev1.Service{ObjectMeta: objMeta(namespace, name, noise(labels), noise(annotations)), Spec: spec}
}

func export(namespace, name string) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{
		ObjectMeta: objMeta(namespace, name, noise(nil), lastApplied()),
		Spec:       mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"tier": "web"}},
		Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{{
			Type: "Conflict", Status: metav1.ConditionFalse, Reason: "NoConflicts", LastTransitionTime: created,
		}}},
	}
}

// pod returns a running, ready pod of a ReplicaSet on nodeName.
func pod(namespace, name, ip, nodeName string, labels, annotations map[string]string) *corev1.Pod {
	labels = noise(labels)
	labels["pod-template-hash"] = "5d8f7c9b4"
	p := &corev1.Pod{
		ObjectMeta: objMeta(namespace, name, labels, noise(annotations)),
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
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: created},
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

type ep struct {
	ips                         []string
	pod, node                   string
	ready, serving, terminating bool
}

func slice(namespace, name, svc string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: objMeta(namespace, name, noise(map[string]string{
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

func grpcPort() []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: ptr.To("grpc")}}
}

// cluster returns the fixture's objects, new on every call.
func cluster() []runtime.Object {
	grpc := []corev1.ServicePort{{
		Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc"),
		TargetPort: intstr.FromString("grpc"), NodePort: 30080,
	}}
	return []runtime.Object{
		namespace("istio-system", map[string]string{normalize.LabelNetwork: "net-east"}),
		namespace("demo", nil),
		namespace("edge", map[string]string{normalize.LabelNetwork: "net-edge"}),
		node("node-a", "us-east1-a"),
		node("node-b", "us-east1-b"),

		// Exported by a ServiceExport, dual-stack, with a pod on another network.
		service("demo", "echo", nil, nil, corev1.ServiceSpec{
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"}, Ports: grpc,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		}),
		export("demo", "echo"),
		slice("demo", "echo-v4", "echo", discoveryv1.AddressTypeIPv4, grpcPort(),
			ep{ips: []string{"10.0.0.1", "10.0.0.99"}, pod: "echo-a", node: "node-a", ready: true, serving: true},
			ep{ips: []string{"10.0.0.2"}, pod: "echo-b", node: "node-b", serving: true, terminating: true},
			ep{ips: []string{"10.0.0.3"}, pod: "echo-c", node: "node-b", ready: true, serving: true}),
		slice("demo", "echo-v6", "echo", discoveryv1.AddressTypeIPv6, grpcPort(),
			ep{ips: []string{"fd00::1"}, pod: "echo-a", node: "node-a", ready: true, serving: true}),
		pod("demo", "echo-a", "10.0.0.1", "node-a",
			map[string]string{"app": "echo", "version": "v1"},
			map[string]string{normalize.AnnotationAmbientRedirection: "enabled"}),
		pod("demo", "echo-b", "10.0.0.2", "node-b",
			map[string]string{normalize.LabelAppName: "echo", normalize.LabelAppVersion: "v2", normalize.LabelNetwork: "net-pod"}, nil),
		pod("demo", "echo-c", "10.0.0.3", "node-b",
			map[string]string{normalize.LabelCanonicalName: "echo-canonical", normalize.LabelCanonicalRevision: "r3"}, nil),

		// Exported by label, headless, in a namespace on its own network.
		service("edge", "cache", map[string]string{normalize.LabelExport: "true"}, nil, corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "redis", Port: 6379, TargetPort: intstr.FromInt32(6379)}},
		}),
		slice("edge", "cache-1", "cache", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{{Name: ptr.To("redis"), Port: ptr.To[int32](6379)}},
			ep{ips: []string{"10.0.1.1"}, pod: "cache-0", node: "node-a", ready: true, serving: true},
			ep{ips: []string{"10.0.1.2"}, node: "node-unknown", ready: true, serving: true}), // its zone is the slice's
		pod("edge", "cache-0", "10.0.1.1", "node-a", nil, nil),

		// Not exported (but under --export=all), with a pod of its own.
		service("demo", "db", nil, nil, corev1.ServiceSpec{ClusterIP: "10.96.0.20", Ports: grpc}),
		slice("demo", "db-1", "db", discoveryv1.AddressTypeIPv4, grpcPort(),
			ep{ips: []string{"10.0.0.20"}, pod: "db-0", node: "node-a", ready: true, serving: true}),
		pod("demo", "db-0", "10.0.0.20", "node-a", map[string]string{"app": "db"}, nil),
		func() *corev1.Pod { // on the host network: no workload
			p := pod("demo", "agent", "192.168.0.1", "node-a", map[string]string{"app": "agent"}, nil)
			p.Spec.HostNetwork = true
			return p
		}(),

		// Exports that cannot be: ExternalName, and no Service.
		service("demo", "ext", nil, nil, corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}),
		export("demo", "ext"),
		export("demo", "ghost"),

		// The east-west gateway: a port override in an annotation.
		func() *corev1.Service {
			s := service("istio-system", "eastwest", map[string]string{normalize.LabelNetwork: "net-east"},
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

// betaInputs returns normalizetest Inputs over objs.
func betaInputs[T any](objs []T) *normalizetest.Inputs {
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, any(o).(metav1.Object))
	}
	return normalizetest.NewInputs(out...)
}

// fullShard builds the shard of in from scratch and returns it as the
// tracker's full update, its lists sorted.
func fullShard(t *testing.T, in normalize.Inputs, opts normalize.Options) *federationpb.ShardUpdate {
	t.Helper()
	tr := newTrackedShard()
	shard.NewBuilder(opts, tr.Tracker, slog.New(slog.NewTextHandler(io.Discard, nil))).Apply(in, nil)
	return sortedFull(t, tr)
}

// sortedFull returns the tracker's next update, which must be the full
// state, with its lists sorted. After a reconnect, the update waits for
// the builder to write the shard anew.
func sortedFull(t *testing.T, tr trackedShard) *federationpb.ShardUpdate {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	next := tr.Next("test", 0)
	for next == nil {
		select {
		case <-tr.Changed():
		case <-deadline.C:
			t.Fatalf("no update from the tracker within %v", waitTimeout)
		}
		next = tr.Next("test", 0)
	}
	u := shardtest.Assemble(t, shardtest.Chunks(next))
	if !u.GetFull() {
		t.Fatalf("tracker update is not the full state: %v", u)
	}
	u.Version, u.Nonce, u.ObservedTime = 0, "", nil
	slices.SortFunc(u.Services, func(a, b *federationpb.Service) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	slices.SortFunc(u.Endpoints, func(a, b *federationpb.Endpoint) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Service, b.Service), strings.Compare(a.Address, b.Address))
	})
	slices.SortFunc(u.Workloads, func(a, b *federationpb.Workload) int { return strings.Compare(a.Uid, b.Uid) })
	return u
}

var testOptions = normalize.Options{ClusterID: "east", Network: "net-default"}

// trackedShard is a shard tracker with one stream, to one hub.
type trackedShard struct {
	*shard.Tracker
	*shard.Stream
}

func newTrackedShard() trackedShard {
	t := shard.NewTracker()
	return trackedShard{t, t.Open()}
}
