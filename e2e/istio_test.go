//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_istiod

package e2e

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/istiodtest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/spoke"
)

// echoIn creates demo/echo in c: a Service (port grpc 8080, exported by
// label) and an EndpointSlice of addrs, with pods labelled as Istio's
// injector labels injected pods.
func echoIn(t *testing.T, c *kubetest.Cluster, zone string, addrs ...string) {
	t.Helper()
	ctx := t.Context()
	createNamespace(t, c, "demo")
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": zone,
	}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo", Labels: map[string]string{"meshfed.io/export": "true"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"}, Ports: []corev1.ServicePort{{
			Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setEchoEndpoints(t, c, addrs...)
}

// setEchoEndpoints makes echo's EndpointSlice (and pods) in c addrs.
func setEchoEndpoints(t *testing.T, c *kubetest.Cluster, addrs ...string) {
	t.Helper()
	ctx := t.Context()
	var eps []discoveryv1.Endpoint
	for _, a := range addrs {
		name := "echo-" + strings.ReplaceAll(a, ".", "-")
		if _, err := c.Client.CoreV1().Pods("demo").Get(ctx, name, metav1.GetOptions{}); err != nil {
			p, err := c.Client.CoreV1().Pods("demo").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{
					"app": "echo", "security.istio.io/tlsMode": "istio", "service.istio.io/canonical-name": "echo",
				}},
				Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "echo", Containers: []corev1.Container{{Name: "echo", Image: "echo"}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Status = corev1.PodStatus{
				Phase: corev1.PodRunning, PodIP: a, PodIPs: []corev1.PodIP{{IP: a}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			}
			if _, err := c.Client.CoreV1().Pods("demo").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		eps = append(eps, discoveryv1.Endpoint{
			Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("node-1"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: name},
		})
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
	old, err := c.Client.DiscoveryV1().EndpointSlices("demo").Get(ctx, "echo-1", metav1.GetOptions{})
	if err == nil {
		slice.ResourceVersion = old.ResourceVersion
		_, err = c.Client.DiscoveryV1().EndpointSlices("demo").Update(ctx, slice, metav1.UpdateOptions{})
	} else {
		_, err = c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, slice, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// setEchoExported labels demo/echo in c exported by meshfed (or not).
func setEchoExported(t *testing.T, c *kubetest.Cluster, on bool) {
	t.Helper()
	svc, err := c.Client.CoreV1().Services("demo").Get(t.Context(), "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if on {
		if svc.Labels == nil {
			svc.Labels = map[string]string{}
		}
		svc.Labels["meshfed.io/export"] = "true"
	} else {
		delete(svc.Labels, "meshfed.io/export")
	}
	if _, err := c.Client.CoreV1().Services("demo").Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func addressesOf(cla *endpointv3.ClusterLoadAssignment) []string {
	out := istiodtest.Addresses(cla)
	sort.Strings(out)
	return out
}

// TestIstiodFedByMeshfed: an unmodified istiod in cluster east, with no
// remote secret, learns west's endpoints from east's spoke (--mcp-addr)
// and serves them, with east's own, to east's sidecars; a change in west
// reaches istiod's EDS (timed), and west's unexport removes them.
func TestIstiodFedByMeshfed(t *testing.T) {
	istiodtest.RequireBinary(t)
	clusters := kubetest.Start(t, 2)
	east, west := clusters[0], clusters[1]
	echoIn(t, east, "z-east", "10.1.0.1")
	echoIn(t, west, "z-west", "10.2.0.1")

	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = freeAddr(t), "", ""
	cfg.XDSWarmUp = 500 * time.Millisecond
	// A lost cluster is withdrawn a second after its spoke goes.
	cfg.Leases.StaleAfter, cfg.Leases.WithdrawAfter = 200*time.Millisecond, time.Second
	h := runHub(t, cfg)

	mcpAddr := freeAddr(t)
	stops := map[string]func(){}
	for _, c := range []struct {
		id      string
		cluster *kubetest.Cluster
		mcp     string
	}{{"east", east, mcpAddr}, {"west", west, ""}} {
		sc := spoke.DefaultConfig()
		sc.ClusterID, sc.Network, sc.Kubeconfig, sc.InCluster = c.id, "net1", c.cluster.Kubeconfig, false
		sc.Hub, sc.Insecure, sc.MCPAddr = h.FederationAddr().String(), true, c.mcp
		stops[c.id] = runSpokeWith(t, sc)
	}
	d := istiodtest.Start(t, east, istiodtest.Options{ConfigSources: []string{"k8s://", "xds://" + mcpAddr}, ClusterID: "east", Network: "net1"})
	t.Logf("istiod ready %v after its start", d.ReadyAfter.Round(time.Millisecond))
	sidecar := istiodtest.Dial(t, d.XDSAddr, istiodtest.Proxy{IP: "10.1.0.9", Pod: "client", Namespace: "demo", ClusterID: "east", Network: "net1"})
	const name = "outbound|8080||echo.demo.svc.cluster.local"
	both := func(want ...string) func(*endpointv3.ClusterLoadAssignment) bool {
		return func(cla *endpointv3.ClusterLoadAssignment) bool { return slices.Equal(addressesOf(cla), want) }
	}
	cla := sidecar.WaitEDS(t, name, both("10.1.0.1:9090", "10.2.0.1:9090"))
	for _, e := range istiodtest.Endpoints(cla) {
		if e.Address == "10.2.0.1:9090" && (!strings.Contains(e.Locality, "z-west") || e.Weight == 0) {
			t.Errorf("west's endpoint %v: want its zone and a weight", e)
		}
	}

	// Changes in west reach east's sidecars through istiod.
	var lat []time.Duration
	addrs := []string{"10.2.0.1"}
	for i := range 10 {
		addrs = append(addrs, fmt.Sprintf("10.2.1.%d", i+1))
		start := time.Now()
		setEchoEndpoints(t, west, addrs...)
		want := []string{"10.1.0.1:9090"}
		for _, a := range addrs {
			want = append(want, a+":9090")
		}
		sort.Strings(want)
		sidecar.WaitEDS(t, name, both(want...))
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("west API write → istiod EDS at east's sidecar: p50 %v, max %v over %d changes",
		lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat))

	// West stops exporting: istiod serves east's endpoint alone; then
	// exports again.
	setEchoExported(t, west, false)
	sidecar.WaitEDS(t, name, both("10.1.0.1:9090"))
	setEchoEndpoints(t, west, "10.2.0.1")
	setEchoExported(t, west, true)
	sidecar.WaitEDS(t, name, both("10.1.0.1:9090", "10.2.0.1:9090"))

	// The hub goes down and istiod restarts meanwhile: it starts, with what
	// east's spoke last had.
	h.stop()
	d2 := istiodtest.Start(t, east, istiodtest.Options{ConfigSources: []string{"k8s://", "xds://" + mcpAddr}, ClusterID: "east", Network: "net1"})
	istiodtest.Dial(t, d2.XDSAddr, istiodtest.Proxy{IP: "10.1.0.8", Pod: "client-2", Namespace: "demo", ClusterID: "east", Network: "net1"}).
		WaitEDS(t, name, both("10.1.0.1:9090", "10.2.0.1:9090"))

	// The hub is back; west's spoke goes for good: once its lease runs out
	// the hub withdraws west, and istiod its endpoints.
	runHub(t, cfg)
	stops["west"]()
	sidecar.WaitEDS(t, name, both("10.1.0.1:9090"))
}

// TestIstiodFedAcrossNetworks: west is on another network, behind its
// east-west gateway. East's sidecars get west's endpoints from istiod as
// the gateway, with Istio mTLS, and never west's pod address; istiod needs
// no meshNetworks of its own.
func TestIstiodFedAcrossNetworks(t *testing.T) {
	istiodtest.RequireBinary(t)
	clusters := kubetest.Start(t, 2)
	east, west := clusters[0], clusters[1]
	echoIn(t, east, "z-east", "10.1.0.1")
	echoIn(t, west, "z-west", "10.2.0.1")
	createNamespace(t, west, "istio-system")
	gw, err := west.Client.CoreV1().Services("istio-system").Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: "istio-system", Labels: map[string]string{"topology.istio.io/network": "net2"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{
			Name: "tls", Port: 15443, TargetPort: intstr.FromInt32(15443), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.50"}}
	if _, err := west.Client.CoreV1().Services("istio-system").UpdateStatus(t.Context(), gw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "", ""
	cfg.XDSWarmUp = 500 * time.Millisecond
	h := runHub(t, cfg)
	mcpAddr := freeAddr(t)
	for _, c := range []struct {
		id, network string
		cluster     *kubetest.Cluster
		mcp         string
	}{{"east", "net1", east, mcpAddr}, {"west", "net2", west, ""}} {
		sc := spoke.DefaultConfig()
		sc.ClusterID, sc.Network, sc.Kubeconfig, sc.InCluster = c.id, c.network, c.cluster.Kubeconfig, false
		sc.Hub, sc.Insecure, sc.MCPAddr = h.FederationAddr().String(), true, c.mcp
		runSpokeWith(t, sc)
	}
	d := istiodtest.Start(t, east, istiodtest.Options{ConfigSources: []string{"k8s://", "xds://" + mcpAddr}, ClusterID: "east", Network: "net1"})
	sidecar := istiodtest.Dial(t, d.XDSAddr, istiodtest.Proxy{IP: "10.1.0.9", Pod: "client", Namespace: "demo", ClusterID: "east", Network: "net1"})
	cla := sidecar.WaitEDS(t, "outbound|8080||echo.demo.svc.cluster.local", func(cla *endpointv3.ClusterLoadAssignment) bool {
		return slices.Equal(addressesOf(cla), []string{"10.1.0.1:9090", "192.0.2.50:15443"})
	})
	for _, e := range istiodtest.Endpoints(cla) {
		if e.Address == "192.0.2.50:15443" && e.Weight == 0 {
			t.Errorf("west's gateway %v has no weight", e)
		}
	}
}

// TestIstiodRemoteSecretBaseline measures what meshfed replaces, on the
// same API servers: istiod in east watching west's whole API through a
// remote secret (a kubeconfig of west in istio-system), and how long a
// change in west takes to reach east's sidecar that way.
func TestIstiodRemoteSecretBaseline(t *testing.T) {
	istiodtest.RequireBinary(t)
	clusters := kubetest.Start(t, 2)
	east, west := clusters[0], clusters[1]
	echoIn(t, east, "z-east", "10.1.0.1")
	echoIn(t, west, "z-west", "10.2.0.1")
	kubeconfig, err := os.ReadFile(west.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, east, "istio-system")
	remoteSecret(t, east, "west", kubeconfig)
	d := istiodtest.Start(t, east, istiodtest.Options{ClusterID: "east", Network: "net1"})
	sidecar := istiodtest.Dial(t, d.XDSAddr, istiodtest.Proxy{IP: "10.1.0.9", Pod: "client", Namespace: "demo", ClusterID: "east", Network: "net1"})
	const name = "outbound|8080||echo.demo.svc.cluster.local"
	want := func(addrs []string) func(*endpointv3.ClusterLoadAssignment) bool {
		w := []string{"10.1.0.1:9090"}
		for _, a := range addrs {
			w = append(w, a+":9090")
		}
		sort.Strings(w)
		return func(cla *endpointv3.ClusterLoadAssignment) bool { return slices.Equal(addressesOf(cla), w) }
	}
	addrs := []string{"10.2.0.1"}
	sidecar.WaitEDS(t, name, want(addrs))
	var lat []time.Duration
	for i := range 10 {
		addrs = append(addrs, fmt.Sprintf("10.2.1.%d", i+1))
		start := time.Now()
		setEchoEndpoints(t, west, addrs...)
		sidecar.WaitEDS(t, name, want(addrs))
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("remote secret: west API write → istiod EDS at east's sidecar: p50 %v, max %v over %d changes",
		lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat))
}
