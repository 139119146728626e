//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_istiod

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"istio.io/istio/pkg/workloadapi"
	"istio.io/istio/pkg/workloadapi/security"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/istiodtest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke"
	"github.com/meshfed/meshfed/spoke/kubeview"
)

// ambientSite is one cluster of an ambient multi-network mesh, set up as
// Istio's own ambient multicluster wants it: the system namespace carries
// the network, demo/echo is a global service (istio.io/global) whose pods
// are captured by ztunnel (what istio-cni annotates), and a cluster with
// a gateway has an east-west Gateway of class istio-east-west with an
// HBONE listener and its address in its status.
type ambientSite struct {
	network, zone string
	// trustDomain, when set, is the trust domain of the cluster's mesh
	// config (the istio ConfigMap istiod reads of a remote cluster).
	trustDomain string
	gateway     string // the east-west gateway's address; "" for none
	vip         string // echo's ClusterIP (in kubetest's 10.0.0.0/24)
	pods        []string
}

// istiodAmbient are the options of an istiod in ambient mode that shares
// services across networks and treats services labelled istio.io/global
// as global, as the ambient profile does.
func istiodAmbient(network string) istiodtest.Options {
	return istiodtest.Options{
		ClusterID: "east", Network: network,
		Env: []string{"PILOT_ENABLE_AMBIENT=true", "AMBIENT_ENABLE_MULTI_NETWORK=true", "PILOT_DEBOUNCE_AFTER=10ms", "PILOT_DEBOUNCE_MAX=100ms"},
		Mesh: map[string]any{"serviceScopeConfigs": []any{map[string]any{
			"servicesSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "istio.io/global", "operator": "In", "values": []string{"true"}}}},
			"scope":            "GLOBAL",
		}}},
	}
}

func (s ambientSite) install(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	ctx := t.Context()
	c.InstallGatewayAPI(t)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: istiodtest.SystemNamespace, Labels: map[string]string{istiodtest.NetworkLabel: s.network}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
	} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if s.trustDomain != "" {
		if _, err := c.Client.CoreV1().ConfigMaps(istiodtest.SystemNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "istio", Namespace: istiodtest.SystemNamespace},
			Data:       map[string]string{"mesh": "trustDomain: " + s.trustDomain + "\n"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": s.zone,
	}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo", Labels: map[string]string{"istio.io/global": "true", "meshfed.io/export": "true"}},
		Spec: corev1.ServiceSpec{ClusterIP: s.vip, Selector: map[string]string{"app": "echo"}, Ports: []corev1.ServicePort{{
			Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setPods(t, c, s.pods...)
	if s.gateway == "" {
		return
	}
	hboneGateway(t, c, s.network, s.gateway)
}

// hboneGateway creates an ambient east-west gateway into network at
// address: a Gateway of class istio-east-west with an HBONE listener and
// its address in its status, and the Service Istio's deployment controller
// makes for it (what a spoke reads gateways from).
func hboneGateway(t *testing.T, c *kubetest.Cluster, network, address string) {
	t.Helper()
	ctx := t.Context()
	if _, err := c.Client.CoreV1().Services(istiodtest.SystemNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: istiodtest.SystemNamespace, Labels: map[string]string{istiodtest.NetworkLabel: network}},
		Spec: corev1.ServiceSpec{ExternalIPs: []string{address}, Ports: []corev1.ServicePort{{
			Name: "mesh", Port: 15008, TargetPort: intstr.FromInt32(15008), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw := gatewayclient.NewForConfigOrDie(c.Config).GatewayV1().Gateways(istiodtest.SystemNamespace)
	created, err := gw.Create(ctx, &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: istiodtest.SystemNamespace, Labels: map[string]string{istiodtest.NetworkLabel: network}},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "istio-east-west", Listeners: []gatewayv1.Listener{{
			Name: "mesh", Port: 15008, Protocol: "HBONE", TLS: &gatewayv1.ListenerTLSConfig{
				Mode:    ptr.To(gatewayv1.TLSModeTerminate),
				Options: map[gatewayv1.AnnotationKey]gatewayv1.AnnotationValue{"gateway.istio.io/tls-terminate-mode": "ISTIO_MUTUAL"},
			},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []gatewayv1.GatewayStatusAddress{{Type: ptr.To(gatewayv1.IPAddressType), Value: address}}
	if _, err := gw.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setPods makes demo/echo's pods in c exactly those with the addresses
// ips, each ready and captured by ztunnel, and its EndpointSlice list
// them.
func setPods(t *testing.T, c *kubetest.Cluster, ips ...string) {
	t.Helper()
	ctx := t.Context()
	pods := c.Client.CoreV1().Pods("demo")
	existing, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, ip := range ips {
		want["echo-"+strings.ReplaceAll(ip, ".", "-")] = ip
	}
	for _, p := range existing.Items {
		if _, ok := want[p.Name]; ok {
			delete(want, p.Name)
			continue
		}
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		ip := want[name]
		p, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: "demo",
				Labels:      map[string]string{"app": "echo"},
				Annotations: map[string]string{"ambient.istio.io/redirection": "enabled"},
			},
			Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "echo", Containers: []corev1.Container{{Name: "echo", Image: "echo"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var eps []discoveryv1.Endpoint
	for _, ip := range ips {
		eps = append(eps, discoveryv1.Endpoint{
			Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("node-1"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "echo-" + strings.ReplaceAll(ip, ".", "-")},
		})
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
	sliceAPI := c.Client.DiscoveryV1().EndpointSlices("demo")
	if old, err := sliceAPI.Get(ctx, "echo-1", metav1.GetOptions{}); err == nil {
		slice.ResourceVersion = old.ResourceVersion
		if _, err := sliceAPI.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if _, err := sliceAPI.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// remoteSecret gives c's istiod a remote cluster named id, read through
// kubeconfig, as istioctl create-remote-secret does.
func remoteSecret(t testing.TB, c *kubetest.Cluster, id string, kubeconfig []byte) {
	t.Helper()
	if _, err := c.Client.CoreV1().Secrets(istiodtest.SystemNamespace).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "istio-remote-secret-" + id, Namespace: istiodtest.SystemNamespace,
			Labels:      map[string]string{"istio/multiCluster": "true"},
			Annotations: map[string]string{"networking.istio.io/cluster": id},
		},
		Data: map[string][]byte{id: kubeconfig},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// mirror copies what c's API serves of every resource a View serves into
// v: the View is then, for istiod, the same cluster.
func mirror(t *testing.T, c *kubetest.Cluster, v *kubeview.View) {
	t.Helper()
	ctx := t.Context()
	set := map[*kubeview.Resource][]kubeview.Object{}
	list := func(r *kubeview.Resource, objs []kubeview.Object, err error) {
		if err != nil {
			t.Fatalf("mirror %s: %v", r.Resource, err)
		}
		set[r] = objs
	}
	pointers := func(n int, at func(i int) kubeview.Object) []kubeview.Object {
		out := make([]kubeview.Object, n)
		for i := range n {
			out[i] = at(i)
		}
		return out
	}
	core := c.Client.CoreV1()
	nss, err := core.Namespaces().List(ctx, metav1.ListOptions{})
	list(&kubeview.Namespaces, pointers(len(nss.Items), func(i int) kubeview.Object { return &nss.Items[i] }), err)
	nodes, err := core.Nodes().List(ctx, metav1.ListOptions{})
	list(&kubeview.Nodes, pointers(len(nodes.Items), func(i int) kubeview.Object { return &nodes.Items[i] }), err)
	pods, err := core.Pods("").List(ctx, metav1.ListOptions{})
	list(&kubeview.Pods, pointers(len(pods.Items), func(i int) kubeview.Object { return &pods.Items[i] }), err)
	svcs, err := core.Services("").List(ctx, metav1.ListOptions{})
	list(&kubeview.Services, pointers(len(svcs.Items), func(i int) kubeview.Object { return &svcs.Items[i] }), err)
	cms, err := core.ConfigMaps("").List(ctx, metav1.ListOptions{})
	list(&kubeview.ConfigMaps, pointers(len(cms.Items), func(i int) kubeview.Object { return &cms.Items[i] }), err)
	eps, err := c.Client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	list(&kubeview.EndpointSlices, pointers(len(eps.Items), func(i int) kubeview.Object { return &eps.Items[i] }), err)
	crds, err := apiextclient.NewForConfigOrDie(c.Config).ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
	list(&kubeview.CustomResourceDefinitions, pointers(len(crds.Items), func(i int) kubeview.Object { return &crds.Items[i] }), err)
	gws, err := gatewayclient.NewForConfigOrDie(c.Config).GatewayV1().Gateways("").List(ctx, metav1.ListOptions{})
	list(&kubeview.Gateways, pointers(len(gws.Items), func(i int) kubeview.Object { return &gws.Items[i] }), err)
	for r, objs := range set {
		if err := v.Replace(*r, objs); err != nil {
			t.Fatal(err)
		}
	}
}

// withoutAPIServer drops the local API server's service and endpoint from
// what a ztunnel holds: each test cluster's API server listens on a port
// of its own, so two clusters' differ by it.
func withoutAPIServer(st istiodtest.State) istiodtest.State {
	for name := range st.Addresses {
		if name == "default/kubernetes.default.svc.cluster.local" || strings.Contains(name, "/discovery.k8s.io/EndpointSlice/default/kubernetes/") {
			delete(st.Addresses, name)
		}
	}
	return st
}

// withRemoteViews has the spoke of sc serve its istiod remote views on a
// loopback address, over HTTPS with the local PKI's certificate (for
// 127.0.0.1) and a token, and write istiod a remote secret for each view.
func withRemoteViews(t *testing.T, sc *spoke.Config) {
	t.Helper()
	certs := t.TempDir()
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(certs, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	sc.RemoteViewsAddr, sc.RemoteViewsTokenFile = addr, tokenFile
	sc.RemoteViewsCertFile, sc.RemoteViewsKeyFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key")
	sc.RemoteViewsURL, sc.RemoteViewsCAFile = "https://"+addr, filepath.Join(certs, "ca.crt")
}

// sortedSANs sorts each service's subject_alt_names: istiod lists them in
// the order it met the service's workloads, which depends on how its
// informers listed them; ztunnel reads them as a set.
func sortedSANs(st istiodtest.State) istiodtest.State {
	for name, a := range st.Addresses {
		if svc := a.GetService(); svc != nil && !slices.IsSorted(svc.GetSubjectAltNames()) {
			a = proto.Clone(a).(*workloadapi.Address)
			slices.Sort(a.GetService().SubjectAltNames)
			st.Addresses[name] = a
		}
	}
	return st
}

// describeZtunnel lists a ztunnel's addresses and policies by name.
func describeZtunnel(st istiodtest.State) string {
	var names []string
	for n := range st.Addresses {
		names = append(names, n)
	}
	for n := range st.Policies {
		names = append(names, "policy "+n)
	}
	slices.Sort(names)
	return fmt.Sprintf("%d: %s", len(names), strings.Join(names, ", "))
}

// westTrustDomain is west's, other than east's (cluster.local), in its
// mesh config, which istiod reads of a remote cluster.
const westTrustDomain = "west.example"

// ambientClusters starts west and two copies of east, as ambientSite
// sets them up (west with westPods behind its gateway), and gives the
// first east's istiod a remote secret of west's API server: Istio's own
// ambient multicluster, the reference. The second east is the one under
// test.
func ambientClusters(t *testing.T, westPods ...string) (ref, other, west *kubetest.Cluster) {
	t.Helper()
	clusters := kubetest.Start(t, 3)
	ref, other, west = clusters[0], clusters[1], clusters[2]
	east := ambientSite{network: "net-east", zone: "z-east", vip: "10.0.0.100", pods: []string{"10.1.0.1"}}
	east.install(t, ref)
	east.install(t, other)
	ambientSite{network: "net-west", zone: "z-west", gateway: "192.0.2.50", vip: "10.0.0.200", pods: westPods, trustDomain: westTrustDomain}.install(t, west)
	kubeconfig, err := os.ReadFile(west.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	remoteSecret(t, ref, "west", kubeconfig)
	return ref, other, west
}

// ztunnelOf starts an ambient istiod in c and returns a ztunnel client of
// it on east's node.
func ztunnelOf(t *testing.T, c *kubetest.Cluster) *istiodtest.Ztunnel {
	t.Helper()
	return istiodtest.DialZtunnel(t, istiodtest.Start(t, c, istiodAmbient("net-east")).XDSAddr,
		istiodtest.ZtunnelNode{IP: "10.1.0.10", Pod: "ztunnel-1", ClusterID: "east", Network: "net-east", NodeName: "node-1"})
}

// waitAlike waits until z holds what the reference ztunnel ref does, after
// withoutAPIServer, and fails with the difference when it does not.
func waitAlike(t *testing.T, ref, z *istiodtest.Ztunnel, what string) {
	t.Helper()
	same := func() (bool, string) {
		want, got := sortedSANs(withoutAPIServer(ref.State())), sortedSANs(withoutAPIServer(z.State()))
		return cmp.Equal(want, got, protocmp.Transform()), cmp.Diff(want, got, protocmp.Transform())
	}
	if !testwait.Within(time.Minute, same) {
		_, diff := same()
		t.Fatalf("%s, the ztunnel holds (-remote secret +under test):\n%s", what, diff)
	}
}

// TestAmbientIstiodOverKubeview: a real istiod in ambient multi-network
// mode reads a remote cluster through a kubeview.View holding that
// cluster's objects exactly as through the cluster's own API server: a
// ztunnel of the local cluster gets the same addresses either way. This
// proves the View is an API server as istiod's multicluster code needs one
// (streaming lists, metadata reads of CRDs, Gateways once their CRD is
// there), apart from what the spoke puts in it.
func TestAmbientIstiodOverKubeview(t *testing.T) {
	istiodtest.RequireBinary(t)
	eastRef, eastView, west := ambientClusters(t, "10.2.0.1", "10.2.0.2")
	view := kubeview.New()
	mirror(t, west, view)
	srv := httptest.NewServer(view)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	remoteSecret(t, eastView, "west", []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: west, cluster: {server: %q}}]
contexts: [{name: west, context: {cluster: west, user: west}}]
users: [{name: west, user: {}}]
current-context: west
`, srv.URL)))

	ref, viewed := ztunnelOf(t, eastRef), ztunnelOf(t, eastView)
	ref.Wait(t, "west's split-horizon workload through the remote secret", time.Minute, func(st istiodtest.State) bool { return capacity(st) == 2 }, describeZtunnel)
	waitAlike(t, ref, viewed, "through the view")
	t.Logf("the ztunnel holds %s", describeZtunnel(viewed.State()))
}

// TestAmbientFedByMeshfed: east's istiod, in ambient multi-network mode
// with no remote secret to any cluster, reads west through east's spoke
// (--remote-views-addr), and east's ztunnel sees west's global services
// as it does through Istio's own ambient multicluster (east's istiod with
// a remote secret for west), after the normalisations withoutAPIServer
// states. Then, side by side: west's pods come and go (timed, both ways);
// west unexports and exports again; the hub goes down, an istiod started
// meanwhile gets the last state, and the restarted hub carries on, with
// nothing of west withdrawn on the way; west's spoke goes, and its lease
// withdraws west.
func TestAmbientFedByMeshfed(t *testing.T) {
	istiodtest.RequireBinary(t)
	westPods := []string{"10.2.0.1", "10.2.0.2"}
	eastRef, eastMesh, west := ambientClusters(t, westPods...)

	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = freeAddr(t), "", ""
	// The default warm-up: a restarted hub waits for every member the
	// spokes name before it sends any a set.
	// A lost cluster is withdrawn a second after its spoke goes.
	cfg.Leases.StaleAfter, cfg.Leases.WithdrawAfter = 200*time.Millisecond, time.Second
	h := runHub(t, cfg)
	stops := map[string]func(){}
	for _, c := range []struct {
		id, network string
		cluster     *kubetest.Cluster
	}{{"east", "net-east", eastMesh}, {"west", "net-west", west}} {
		sc := spoke.DefaultConfig()
		sc.ClusterID, sc.Network, sc.Kubeconfig, sc.InCluster = c.id, c.network, c.cluster.Kubeconfig, false
		sc.Hub, sc.Insecure = h.FederationAddr().String(), true
		if c.id == "west" {
			sc.TrustDomain = westTrustDomain
		} else {
			// The spoke writes istiod's remote secret for west.
			withRemoteViews(t, &sc)
		}
		stops[c.id] = runSpokeWith(t, sc)
	}

	ref, fed := ztunnelOf(t, eastRef), ztunnelOf(t, eastMesh)
	ref.Wait(t, "west's split-horizon workload through the remote secret", time.Minute, func(st istiodtest.State) bool { return capacity(st) == 2 }, describeZtunnel)
	alike := func(z *istiodtest.Ztunnel, what string) {
		t.Helper()
		waitAlike(t, ref, z, what+", fed by meshfed")
	}
	alike(fed, "at first")
	t.Logf("the ztunnel holds %s", describeZtunnel(fed.State()))
	// West's trust domain is not east's; istiod names west's identities
	// in its own either way (its ambient index builds a remote service's
	// SANs from its local mesh config), and the comparison holds.
	t.Logf("echo's SANs: %v", fed.State().Addresses["demo/echo.demo.svc.cluster.local"].GetService().GetSubjectAltNames())

	// West's pods come and go: each change reaches both ztunnels (timed
	// from the write into west's API server).
	var viaSecret, viaMeshfed []time.Duration
	for i := range 10 {
		for _, pods := range [][]string{append(slices.Clone(westPods), fmt.Sprintf("10.2.1.%d", i+1)), westPods} {
			start := time.Now()
			setPods(t, west, pods...)
			var wg sync.WaitGroup
			var took [2]time.Duration
			var errs [2]error
			for j, z := range []*istiodtest.Ztunnel{ref, fed} {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					_, errs[j] = z.Await(ctx, func(st istiodtest.State) bool { return capacity(st) == uint32(len(pods)) })
					took[j] = time.Since(start)
				})
			}
			wg.Wait()
			if err := errors.Join(errs[:]...); err != nil {
				t.Fatalf("west at %d pods: %v", len(pods), err)
			}
			viaSecret, viaMeshfed = append(viaSecret, took[0]), append(viaMeshfed, took[1])
		}
	}
	t.Logf("west pod write -> east's ztunnel over %d changes: remote secret p50 %v p99 %v; meshfed p50 %v p99 %v",
		len(viaSecret), percentile(viaSecret, 50), percentile(viaSecret, 99), percentile(viaMeshfed, 50), percentile(viaMeshfed, 99))
	alike(fed, "after west's pods changed")

	// West unexports echo: east's ztunnel no longer reaches it through
	// meshfed; west exports it again.
	setEchoExported(t, west, false)
	fed.Wait(t, "west's echo gone after it unexported it", time.Minute, withoutWestEcho, describeZtunnel)
	setEchoExported(t, west, true)
	alike(fed, "after west exported echo again")

	// The hub goes down. An istiod started meanwhile gets the last state
	// from east's spoke; the restarted hub carries on, and west's changes
	// reach the ztunnel again, which never lost west on the way.
	h.stop()
	fed2 := ztunnelOf(t, eastMesh)
	alike(fed2, "from an istiod started while the hub is down")
	runHub(t, cfg)
	westPods = append(westPods, "10.2.2.1")
	setPods(t, west, westPods...)
	ref.Wait(t, "three west pods", time.Minute, func(st istiodtest.State) bool { return capacity(st) == 3 }, describeZtunnel)
	alike(fed2, "after the hub restarted")
	for _, name := range fed2.Removed() {
		if strings.Contains(name, "net-west") || name == "demo/echo.demo.svc.cluster.local" {
			t.Errorf("%s was withdrawn from the ztunnel while the hub restarted", name)
		}
	}

	// West's spoke goes: once its lease runs out, west is withdrawn, and
	// its remote secret deleted.
	stops["west"]()
	fed2.Wait(t, "west withdrawn after its spoke went", time.Minute, withoutWest, describeZtunnel)
	testwait.ForState(t, "west's remote secret deleted", func() (bool, string) {
		_, err := eastMesh.Client.CoreV1().Secrets(istiodtest.SystemNamespace).Get(t.Context(), "meshfed-remote-west", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// capacity is west's split-horizon workload's capacity for demo/echo, 0
// when there is none.
func capacity(st istiodtest.State) uint32 {
	for name, a := range st.Addresses {
		if strings.HasPrefix(name, "net-west/SplitHorizonWorkload/") && strings.HasSuffix(name, "/demo/echo.demo.svc.cluster.local") {
			return a.GetWorkload().GetCapacity().GetValue()
		}
	}
	return 0
}

// withoutWestEcho reports that a ztunnel holds nothing of west's echo: no
// split-horizon workload, and echo with east's address alone (west's
// gateway stays: west is still a member).
func withoutWestEcho(st istiodtest.State) bool {
	return capacity(st) == 0 && len(st.Addresses["demo/echo.demo.svc.cluster.local"].GetService().GetAddresses()) == 1
}

// withoutWest reports that a ztunnel holds nothing of west: no workload
// of its network either.
func withoutWest(st istiodtest.State) bool {
	for name := range st.Addresses {
		if strings.Contains(name, "net-west") {
			return false
		}
	}
	return withoutWestEcho(st)
}

// percentile returns the p-th percentile of d (nearest rank).
func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Sorted(slices.Values(d))
	i := max((p*len(s)+99)/100-1, 0)
	return s[i].Round(100 * time.Microsecond)
}

// TestAmbientPolicyNamespacesIgnoreTrustDomain: what istiod sends a
// ztunnel of an AuthorizationPolicy that admits a namespace or a service
// account names no trust domain, and one that names principals keeps it.
// ztunnel matches the first against the peer's SPIFFE namespace (or
// namespace and account) in any trust domain: across clusters, a
// namespace-wide ALLOW admits that namespace from every member, whatever
// trust domain the cluster policy gives each. docs/security.md says so.
func TestAmbientPolicyNamespacesIgnoreTrustDomain(t *testing.T) {
	istiodtest.RequireBinary(t)
	c := kubetest.Start(t, 1)[0]
	c.InstallAuthorizationPolicies(t)
	ambientSite{network: "net-east", zone: "z-east", vip: "10.0.0.100", pods: []string{"10.1.0.1"}}.install(t, c)
	policies := dynamic.NewForConfigOrDie(c.Config).Resource(schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}).Namespace("demo")
	for name, from := range map[string]map[string]any{
		"from-namespace":       {"namespaces": []any{"prod"}},
		"from-service-account": {"serviceAccounts": []any{"prod/client"}},
		"from-principal":       {"principals": []any{"cluster.local/ns/prod/sa/client"}},
	} {
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
			"metadata": map[string]any{"name": name, "namespace": "demo"},
			"spec":     map[string]any{"action": "ALLOW", "rules": []any{map[string]any{"from": []any{map[string]any{"source": from}}}}},
		}}
		if _, err := policies.Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	z := ztunnelOf(t, c)
	st := z.Wait(t, "the three policies", time.Minute, func(st istiodtest.State) bool { return len(st.Policies) == 3 }, describeZtunnel)
	match := func(name string) *security.Match {
		return st.Policies["demo/"+name].GetGroups()[0].GetRules()[0].GetMatches()[0]
	}
	if ns := match("from-namespace").GetNamespaces(); len(ns) != 1 || ns[0].GetExact() != "prod" {
		t.Errorf("a namespace's match %v, want the namespace alone (no trust domain)", ns)
	}
	if sa := match("from-service-account").GetServiceAccounts(); len(sa) != 1 || sa[0].GetNamespace() != "prod" || sa[0].GetServiceAccount() != "client" {
		t.Errorf("a service account's match %v, want namespace and name alone (no trust domain)", sa)
	}
	if p := match("from-principal").GetPrincipals(); len(p) != 1 || p[0].GetExact() != "cluster.local/ns/prod/sa/client" {
		t.Errorf("a principal's match %v, want the principal with its trust domain", p)
	}
}
