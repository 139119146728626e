package istiodtest

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/internal/kubetest"
)

const (
	echoHost    = "echo.demo.svc.cluster.local"
	echoCluster = "outbound|8080||" + echoHost
	// localEndpoint is echo's endpoint in the cluster istiod runs in.
	localEndpoint = "10.1.0.1:8080"
)

// client is the proxy the tests ask istiod as: a sidecar in east, on net1.
var client = Proxy{IP: "10.1.0.9", Pod: "client", Namespace: "demo", ClusterID: "east", Network: "net1"}

// TestIstiodMCP runs istiod on cluster east, whose Service demo/echo has
// one endpoint, with the Kubernetes API and an MCP server as config
// sources; the MCP server serves a ServiceEntry for echo's hostname in
// echo's namespace, with an endpoint of another cluster. A sidecar and a
// proxyless gRPC client asking istiod for echo's endpoints get both: the
// entry merges with the Service. It times how long istiod takes to become
// ready and a change of the entry to reach the sidecar, and checks that
// meshNetworks' gateways replace the other network's endpoint.
func TestIstiodMCP(t *testing.T) {
	RequireBinary(t)
	c := kubetest.Start(t, 1)[0]
	createEcho(t, c)
	mcp := startMCPServer(t)
	mcp.Set(serviceEntryType, echoEntry(t, 1, "10.2.0.1"))
	sources := []string{"k8s://", "xds://" + mcp.Addr}

	d := Start(t, c, Options{ConfigSources: sources, ClusterID: "east", Network: "net1"})
	requested := mcp.Requested()
	t.Logf("istiod ready %v after its start; it asked the MCP server for %d types: %v",
		d.ReadyAfter.Round(time.Millisecond), len(requested), requested)
	for _, typeURL := range []string{serviceEntryType, "networking.istio.io/v1/WorkloadEntry"} {
		if !slices.Contains(requested, typeURL) {
			t.Errorf("istiod did not ask for %s", typeURL)
		}
	}

	for _, p := range []struct {
		name  string
		proxy Proxy
	}{
		{"Sidecar", client},
		{"Proxyless", Proxy{IP: "10.1.0.10", Pod: "grpc-client", Namespace: "demo", ClusterID: "east", Network: "net1", Proxyless: true}},
	} {
		t.Run(p.name, func(t *testing.T) {
			ads := Dial(t, d.XDSAddr, p.proxy)
			ads.WaitCluster(t, echoCluster)
			got := Endpoints(ads.WaitEDS(t, echoCluster, HasAddresses(localEndpoint, "10.2.0.1:8080")))
			t.Logf("EDS %s: %v", echoCluster, got)
			remote := got[slices.IndexFunc(got, func(e Endpoint) bool { return e.Address == "10.2.0.1:8080" })]
			if remote.Locality != "region2/zone2/" || remote.Weight == 0 {
				t.Errorf("10.2.0.1: locality %q, weight %d; want the ServiceEntry's region2/zone2/ and a weight", remote.Locality, remote.Weight)
			}
			if !p.proxy.Proxyless && remote.Metadata["envoy.transport_socket_match/tlsMode"] != "istio" {
				t.Errorf("10.2.0.1: metadata %v, want tlsMode istio", remote.Metadata)
			}
		})
	}

	t.Run("Propagation", func(t *testing.T) {
		ads := Dial(t, d.XDSAddr, client)
		ads.WaitEDS(t, echoCluster, HasAddresses(localEndpoint, "10.2.0.1:8080"))
		const changes = 20
		took := make([]time.Duration, 0, changes)
		for i := range changes {
			ip := fmt.Sprintf("10.2.0.%d", i+2)
			set := mcp.Set(serviceEntryType, echoEntry(t, i+2, ip))
			ads.WaitEDS(t, echoCluster, HasAddresses(localEndpoint, ip+":8080"))
			took = append(took, time.Since(set))
		}
		slices.Sort(took)
		t.Logf("ServiceEntry change → sidecar EDS, %d changes: p50 %v, p90 %v, max %v (%d MCP responses in all)",
			changes, took[changes/2].Round(time.Millisecond), took[changes*9/10].Round(time.Millisecond),
			took[changes-1].Round(time.Millisecond), mcp.Responses())
	})

	// A second istiod, told net2's gateway by meshNetworks: a sidecar on
	// net1 gets the gateway in place of the endpoint on net2, and its own
	// network's endpoint as it is.
	t.Run("SplitHorizon", func(t *testing.T) {
		mcp.Set(serviceEntryType, echoEntry(t, 100, "10.2.0.1"))
		d := Start(t, c, Options{
			ConfigSources: sources,
			ClusterID:     "east",
			Network:       "net1",
			MeshNetworks:  "networks:\n  net2:\n    gateways:\n    - address: 10.2.0.100\n      port: 15443\n",
		})
		ads := Dial(t, d.XDSAddr, client)
		got := Endpoints(ads.WaitEDS(t, echoCluster, HasAddresses(localEndpoint, "10.2.0.100:15443")))
		t.Logf("EDS %s: %v", echoCluster, got)
	})
}

// createEcho creates namespace demo, Service echo (port grpc 8080) and its
// EndpointSlice with one ready endpoint, localEndpoint.
func createEcho(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	ctx := t.Context()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := c.Client.CoreV1().Services("demo").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "demo",
			Name:      "echo-local",
			Labels:    map[string]string{discoveryv1.LabelServiceName: "echo", discoveryv1.LabelManagedBy: "istiodtest"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.1.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// echoEntry is the ServiceEntry that adds echo's endpoint ip in another
// cluster, on net2 in region2/zone2, as an MCP resource of version
// version. It names echo's hostname and port as the Service does, in the
// Service's namespace: what makes istiod merge the two.
func echoEntry(t *testing.T, version int, ip string) *anypb.Any {
	t.Helper()
	return mcpResource(t, "demo", "echo-west", strconv.Itoa(version), &networkingv1alpha3.ServiceEntry{
		Hosts:      []string{echoHost},
		Ports:      []*networkingv1alpha3.ServicePort{{Number: 8080, Name: "grpc", Protocol: "GRPC"}},
		Location:   networkingv1alpha3.ServiceEntry_MESH_INTERNAL,
		Resolution: networkingv1alpha3.ServiceEntry_STATIC,
		Endpoints: []*networkingv1alpha3.WorkloadEntry{{
			Address:  ip,
			Labels:   map[string]string{"security.istio.io/tlsMode": "istio"},
			Network:  "net2",
			Locality: "region2/zone2",
		}},
	})
}
