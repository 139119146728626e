package demo_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/examples/demo"
)

// cluster is the parsed manifests of one demo cluster. Maps are keyed by
// name, or "namespace/name" for namespaced objects.
type cluster struct {
	namespaces map[string]*corev1.Namespace
	nodes      map[string]*corev1.Node
	services   map[string]*corev1.Service
	exports    map[string]*mcsv1alpha1.ServiceExport
	pods       map[string]*corev1.Pod
	slices     map[string]*discoveryv1.EndpointSlice
}

func key(meta metav1.ObjectMeta) string {
	if meta.Namespace == "" {
		return meta.Name
	}
	return meta.Namespace + "/" + meta.Name
}

// add decodes doc strictly (unknown fields are errors) into a new T and
// stores it in m under its key.
func add[T any](m map[string]*T, doc []byte, meta func(*T) metav1.ObjectMeta) error {
	obj := new(T)
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return err
	}
	k := key(meta(obj))
	if _, dup := m[k]; dup {
		return errors.New("duplicate " + k)
	}
	m[k] = obj
	return nil
}

func load(t *testing.T, name string) *cluster {
	t.Helper()
	c := &cluster{
		namespaces: map[string]*corev1.Namespace{},
		nodes:      map[string]*corev1.Node{},
		services:   map[string]*corev1.Service{},
		exports:    map[string]*mcsv1alpha1.ServiceExport{},
		pods:       map[string]*corev1.Pod{},
		slices:     map[string]*discoveryv1.EndpointSlice{},
	}
	files, err := fs.Glob(demo.Manifests, path.Join(name, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests for cluster %s (err %v)", name, err)
	}
	for _, file := range files {
		data, err := fs.ReadFile(demo.Manifests, file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
			switch tm.APIVersion + ", Kind=" + tm.Kind {
			case "v1, Kind=Namespace":
				err = add(c.namespaces, doc, func(o *corev1.Namespace) metav1.ObjectMeta { return o.ObjectMeta })
			case "v1, Kind=Node":
				err = add(c.nodes, doc, func(o *corev1.Node) metav1.ObjectMeta { return o.ObjectMeta })
			case "v1, Kind=Service":
				err = add(c.services, doc, func(o *corev1.Service) metav1.ObjectMeta { return o.ObjectMeta })
			case "v1, Kind=Pod":
				err = add(c.pods, doc, func(o *corev1.Pod) metav1.ObjectMeta { return o.ObjectMeta })
			case "discovery.k8s.io/v1, Kind=EndpointSlice":
				err = add(c.slices, doc, func(o *discoveryv1.EndpointSlice) metav1.ObjectMeta { return o.ObjectMeta })
			case mcsv1alpha1.GroupVersion.String() + ", Kind=ServiceExport":
				err = add(c.exports, doc, func(o *mcsv1alpha1.ServiceExport) metav1.ObjectMeta { return o.ObjectMeta })
			default:
				err = errors.New("unexpected apiVersion " + tm.APIVersion + ", kind " + tm.Kind)
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", file, i, err)
			}
		}
	}
	return c
}

func TestClusters(t *testing.T) {
	entries, err := fs.ReadDir(demo.Manifests, ".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(demo.EchoBackends())), dirs); diff != "" {
		t.Errorf("cluster directories vs EchoBackends (-backends +dirs):\n%s", diff)
	}
}

// TestEchoBackends keeps the echo EndpointSlices, their pods and the echo
// Service in step with EchoBackends and EchoPort.
func TestEchoBackends(t *testing.T) {
	for name, want := range demo.EchoBackends() {
		t.Run(name, func(t *testing.T) {
			c := load(t, name)
			svc := c.services["demo/echo"]
			if svc == nil {
				t.Fatal("no Service demo/echo")
			}
			wantSvcPorts := []corev1.ServicePort{{Name: "grpc", Protocol: corev1.ProtocolTCP, AppProtocol: ptr("grpc"), Port: demo.EchoPort, TargetPort: intstr.FromInt32(demo.EchoPort)}}
			if diff := cmp.Diff(wantSvcPorts, svc.Spec.Ports); diff != "" {
				t.Errorf("echo Service ports (-want +got):\n%s", diff)
			}

			var got []string
			for _, s := range c.slices {
				if s.Namespace != "demo" || s.Labels[discoveryv1.LabelServiceName] != "echo" {
					continue
				}
				wantPorts := []discoveryv1.EndpointPort{{Name: ptr("grpc"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr[int32](demo.EchoPort), AppProtocol: ptr("grpc")}}
				if diff := cmp.Diff(wantPorts, s.Ports); diff != "" {
					t.Errorf("EndpointSlice %s ports (-want +got):\n%s", s.Name, diff)
				}
				if s.AddressType != discoveryv1.AddressTypeIPv4 {
					t.Errorf("EndpointSlice %s: address type %s, want IPv4", s.Name, s.AddressType)
				}
				for _, ep := range s.Endpoints {
					got = append(got, ep.Addresses...)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("echo endpoint addresses (-EchoBackends +manifests):\n%s", diff)
			}
		})
	}
}

// TestConsistent checks what a spoke relies on: every endpoint points at a
// ready pod with the same IP on an existing node with locality labels, every
// slice and export names an existing Service, and each cluster has a
// network and an east-west gateway on it.
func TestConsistent(t *testing.T) {
	for name := range demo.EchoBackends() {
		t.Run(name, func(t *testing.T) {
			c := load(t, name)
			for k, s := range c.slices {
				svc := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
				if c.services[svc] == nil {
					t.Errorf("EndpointSlice %s: no Service %s", k, svc)
				}
				for _, ep := range s.Endpoints {
					checkEndpoint(t, c, k, ep)
				}
			}
			for k := range c.exports {
				if c.services[k] == nil {
					t.Errorf("ServiceExport %s: no Service %s", k, k)
				}
			}
			for k, svc := range c.services {
				if c.namespaces[svc.Namespace] == nil {
					t.Errorf("Service %s: no Namespace %s", k, svc.Namespace)
				}
			}

			network := c.namespaces["istio-system"].Labels["topology.istio.io/network"]
			if want := "network-" + name; network != want {
				t.Errorf("istio-system network %q, want %q", network, want)
			}
			gw := c.services["istio-system/istio-eastwestgateway"]
			if gw == nil {
				t.Fatal("no east-west gateway Service")
			}
			if got := gw.Labels["topology.istio.io/network"]; got != network {
				t.Errorf("gateway network %q, want %q", got, network)
			}
			var ports []string
			for _, p := range gw.Spec.Ports {
				ports = append(ports, p.Name+":"+strconv.Itoa(int(p.Port)))
			}
			if diff := cmp.Diff([]string{"tls:15443", "tunnel:15008"}, ports); diff != "" {
				t.Errorf("gateway ports (-want +got):\n%s", diff)
			}
			if gw.Spec.Type != corev1.ServiceTypeLoadBalancer || len(gw.Status.LoadBalancer.Ingress) != 1 {
				t.Fatalf("gateway: type %s with %d ingress addresses, want a LoadBalancer with one", gw.Spec.Type, len(gw.Status.LoadBalancer.Ingress))
			}
			if got, want := gw.Status.LoadBalancer.Ingress[0].IP, demo.Gateways()[name]; got != want {
				t.Errorf("gateway address %s, want %s (Gateways)", got, want)
			}
		})
	}
}

func checkEndpoint(t *testing.T, c *cluster, slice string, ep discoveryv1.Endpoint) {
	t.Helper()
	if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || ep.NodeName == nil || len(ep.Addresses) != 1 {
		t.Errorf("EndpointSlice %s: endpoint %v: want one address, a node and a Pod targetRef", slice, ep.Addresses)
		return
	}
	if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
		t.Errorf("EndpointSlice %s: endpoint %v is not ready", slice, ep.Addresses)
	}
	pod := c.pods[ep.TargetRef.Namespace+"/"+ep.TargetRef.Name]
	if pod == nil {
		t.Errorf("EndpointSlice %s: no Pod %s/%s", slice, ep.TargetRef.Namespace, ep.TargetRef.Name)
		return
	}
	if pod.Status.PodIP != ep.Addresses[0] || len(pod.Status.PodIPs) != 1 || pod.Status.PodIPs[0].IP != ep.Addresses[0] {
		t.Errorf("Pod %s: IPs %q, %v; want %s as in EndpointSlice %s", pod.Name, pod.Status.PodIP, pod.Status.PodIPs, ep.Addresses[0], slice)
	}
	if pod.Spec.NodeName != *ep.NodeName {
		t.Errorf("Pod %s: node %q, EndpointSlice %s says %q", pod.Name, pod.Spec.NodeName, slice, *ep.NodeName)
	}
	ready := slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
	if pod.Status.Phase != corev1.PodRunning || !ready {
		t.Errorf("Pod %s: phase %s, Ready %v; want Running and Ready", pod.Name, pod.Status.Phase, ready)
	}
	node := c.nodes[*ep.NodeName]
	if node == nil {
		t.Errorf("EndpointSlice %s: no Node %s", slice, *ep.NodeName)
		return
	}
	zone := node.Labels[corev1.LabelTopologyZone]
	if node.Labels[corev1.LabelTopologyRegion] == "" || zone == "" {
		t.Errorf("Node %s: no region or zone label", node.Name)
	}
	if ep.Zone != nil && *ep.Zone != zone {
		t.Errorf("EndpointSlice %s: endpoint %v in zone %q, its node in %q", slice, ep.Addresses, *ep.Zone, zone)
	}
}

// TestExported pins what each cluster exports, by ServiceExport or by the
// meshfed.io/export label: db must stay in east.
func TestExported(t *testing.T) {
	tests := []struct {
		cluster string
		want    []string
	}{
		{cluster: "east", want: []string{"demo/echo", "demo/frontend"}},
		{cluster: "west", want: []string{"demo/echo", "demo/payments"}},
	}
	for _, tt := range tests {
		t.Run(tt.cluster, func(t *testing.T) {
			c := load(t, tt.cluster)
			var got []string
			for k, svc := range c.services {
				if c.exports[k] != nil || svc.Labels["meshfed.io/export"] == "true" {
					got = append(got, k)
				}
			}
			slices.Sort(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("exported services (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEchoClusterIPsDiffer(t *testing.T) {
	seen := map[string]string{}
	for name := range demo.EchoBackends() {
		svc := load(t, name).services["demo/echo"]
		if svc == nil {
			t.Fatalf("%s: no Service demo/echo", name)
		}
		ip := svc.Spec.ClusterIP
		if other, dup := seen[ip]; dup {
			t.Errorf("echo has cluster IP %s in both %s and %s", ip, other, name)
		}
		seen[ip] = name
	}
}

func ptr[T any](v T) *T { return &v }
