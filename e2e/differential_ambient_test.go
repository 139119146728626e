//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_istiod

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/istiodtest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/spoke"
)

// installAmbient sets up a site of the differential matrix for ambient:
// services global (istio.io/global) with fixed ClusterIPs, the pods that
// take mTLS captured by ztunnel (ambient), and, where the site has a
// gateway, an east-west Gateway of class istio-east-west with its HBONE
// listener, as Istio's ambient multicluster wants them.
func (s diffSite) installAmbient(t *testing.T, c *kubetest.Cluster, services []diffService) {
	t.Helper()
	ctx := t.Context()
	c.InstallGatewayAPI(t)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: istiodtest.SystemNamespace, Labels: map[string]string{istiodtest.NetworkLabel: s.network}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
	} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range diffNodes {
		labels := map[string]string{}
		if n.region != "" {
			labels["topology.kubernetes.io/region"], labels["topology.kubernetes.io/zone"] = n.region, n.zone
		}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if s.gateway != "" {
		if _, err := c.Client.CoreV1().Services(istiodtest.SystemNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: istiodtest.SystemNamespace, Labels: map[string]string{istiodtest.NetworkLabel: s.network}},
			Spec: corev1.ServiceSpec{ExternalIPs: []string{s.gateway}, Ports: []corev1.ServicePort{{
				Name: "mesh", Port: 15008, TargetPort: intstr.FromInt32(15008), Protocol: corev1.ProtocolTCP,
			}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		gw := gatewayclient.NewForConfigOrDie(c.Config).GatewayV1().Gateways(istiodtest.SystemNamespace)
		created, err := gw.Create(ctx, &gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: istiodtest.SystemNamespace, Labels: map[string]string{istiodtest.NetworkLabel: s.network}},
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
		created.Status.Addresses = []gatewayv1.GatewayStatusAddress{{Type: ptr.To(gatewayv1.IPAddressType), Value: s.gateway}}
		if _, err := gw.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, svc := range services {
		eps, ok := svc.endpoints[s.id]
		if !ok {
			continue
		}
		spec := corev1.ServiceSpec{Selector: map[string]string{"app": svc.name}, Ports: svc.ports, ClusterIP: fmt.Sprintf("10.0.0.%d", 20+i)}
		if svc.headless {
			spec.ClusterIP = corev1.ClusterIPNone
		}
		if _, err := c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc.name, Namespace: "demo", Labels: map[string]string{"istio.io/global": "true", "meshfed.io/export": "true"}},
			Spec:       spec,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: svc.name + "-1", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: svc.name}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for _, p := range svc.ports {
			target := p.TargetPort.IntVal
			if p.TargetPort.Type == intstr.String {
				target = 8000
			}
			slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(target), Protocol: ptr.To(p.Protocol)})
		}
		for j, e := range eps {
			ep := discoveryv1.Endpoint{
				Addresses:  []string{e.ip},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating)},
				NodeName:   ptr.To(e.node),
			}
			if e.pod != "" {
				name := fmt.Sprintf("%s-%d", svc.name, j)
				ambientPod(t, c, name, svc.name, e)
				ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: name}
			}
			slice.Endpoints = append(slice.Endpoints, ep)
		}
		if _, err := c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// ambientPod is diffPod in ambient: a pod that takes mTLS is captured by
// ztunnel (what istio-cni annotates) rather than injected.
func ambientPod(t *testing.T, c *kubetest.Cluster, name, app string, e diffEndpoint) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{NodeName: e.node, ServiceAccountName: app, Containers: []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8000},
		}}}},
	}
	if e.pod == "mtls" {
		pod.Annotations = map[string]string{"ambient.istio.io/redirection": "enabled"}
	}
	pods := c.Client.CoreV1().Pods("demo")
	p, err := pods.Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := corev1.ConditionFalse
	if e.ready {
		ready = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: e.ip, PodIPs: []corev1.PodIP{{IP: e.ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}},
	}
	if _, err := pods.UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWorkloadAPIMatchesIstiod is the differential test for ztunnels: on
// the same generated matrix, the ztunnel of an ambient istiod that reads
// the other clusters through remote secrets (Istio's own ambient
// multicluster) and that of one fed by meshfed's remote views must hold
// the same addresses.
func TestWorkloadAPIMatchesIstiod(t *testing.T) {
	istiodtest.RequireBinary(t)
	services := diffMatrix(diffSeed(t), 16)
	for i := range services {
		services[i].dualStack = false // ClusterIPs are fixed, IPv4 only
	}
	// East twice: the reference's, and the one meshfed feeds.
	clusters := kubetest.Start(t, len(diffSites)+1)
	eastRef, eastFed := clusters[0], clusters[len(diffSites)]
	diffSites[0].installAmbient(t, eastRef, services)
	diffSites[0].installAmbient(t, eastFed, services)
	for i, s := range diffSites[1:] {
		s.installAmbient(t, clusters[i+1], services)
		kubeconfig, err := os.ReadFile(clusters[i+1].Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		remoteSecret(t, eastRef, s.id, kubeconfig)
	}

	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = freeAddr(t), "", ""
	h := runHub(t, cfg)
	certs := t.TempDir()
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(certs, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	viewsAddr := freeAddr(t)
	for i, s := range diffSites {
		c := clusters[i]
		sc := spoke.DefaultConfig()
		sc.ClusterID, sc.Network, sc.InCluster = s.id, s.network, false
		sc.Hub, sc.Insecure = h.FederationAddr().String(), true
		if i == 0 {
			c = eastFed
			sc.RemoteViewsAddr, sc.RemoteViewsTokenFile = viewsAddr, tokenFile
			sc.RemoteViewsCertFile, sc.RemoteViewsKeyFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key")
			sc.RemoteViewsURL, sc.RemoteViewsCAFile = "https://"+viewsAddr, filepath.Join(certs, "ca.crt")
		}
		sc.Kubeconfig = c.Kubeconfig
		runSpokeWith(t, sc)
	}
	ref, fed := ztunnelOf(t, eastRef), ztunnelOf(t, eastFed)
	waitAlike(t, ref, fed, "the generated matrix")
	t.Logf("the ztunnels agree: %s", describeZtunnel(fed.State()))
}
