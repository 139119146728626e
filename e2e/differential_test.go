//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_istiod

package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/istiodtest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke"
)

// The differential test: istiod (multi-primary over remote secrets, with
// DestinationRules that turn on locality load balancing) and meshfed (a
// hub and a spoke per cluster) read the same real API servers, holding a
// generated matrix of services, and each answers the same proxies. Their
// EDS must agree once normalised, but for the deliberate differences
// listed in deliberateDifferences; any other difference fails the test.

// diffSeedEnv, when set, seeds the matrix: a run with another seed tries
// other services (the default, 7, is what CI runs).
const diffSeedEnv = "MESHFED_DIFF_SEED"

// diffSeed is the matrix's seed: diffSeedEnv's, else 7.
func diffSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(7)
	if v := os.Getenv(diffSeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", diffSeedEnv, v, err)
		}
	}
	t.Logf("matrix of seed %d (%s)", seed, diffSeedEnv)
	return seed
}

// diffSite is one cluster of the test.
type diffSite struct {
	id, network string
	gateway     string // the east-west gateway's address (port 15443); "" for none
}

// diffSites: east, where istiod runs; south on east's network; west behind
// a gateway; north on a network with no gateway.
var diffSites = []diffSite{
	{id: "east", network: "net-east"},
	{id: "south", network: "net-east"},
	{id: "west", network: "net-west", gateway: "192.0.2.20"},
	{id: "north", network: "net-north"},
}

// diffNodes are the nodes of every cluster: their localities.
var diffNodes = []struct{ name, region, zone string }{
	{"n-r1-z1", "r1", "z1"},
	{"n-r1-z2", "r1", "z2"},
	{"n-r2-z3", "r2", "z3"},
	{"n-none", "", ""},
}

// diffEndpoint is one endpoint of the matrix.
type diffEndpoint struct {
	ip, node string
	// ready, serving, terminating are the EndpointSlice conditions.
	ready, serving, terminating bool
	// pod: "mtls" (a pod that takes Istio mTLS), "plain" (a pod that
	// does not), "" (no pod: no targetRef).
	pod string
}

// ipv6 is the endpoint's IPv6 address: 10.a.b.c is fd00::a:b:c.
func (e diffEndpoint) ipv6() string {
	return "fd00::" + strings.ReplaceAll(strings.TrimPrefix(e.ip, "10."), ".", ":")
}

// diffService is one service of the matrix.
type diffService struct {
	name     string
	headless bool
	// dualStack: an IPv6 address beside each endpoint's IPv4 one (its
	// pod's second IP), in an IPv6 EndpointSlice of its own.
	dualStack bool
	ports     []corev1.ServicePort
	// endpoints by cluster ID; a cluster with no entry has no such
	// service.
	endpoints map[string][]diffEndpoint
}

// String describes the service for the test's log: each cluster's
// endpoints as ip/node/conditions/pod.
func (s diffService) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s headless=%v dual-stack=%v ports=%d:", s.name, s.headless, s.dualStack, len(s.ports))
	for _, site := range diffSites {
		eps, ok := s.endpoints[site.id]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, " %s[", site.id)
		for i, e := range eps {
			if i > 0 {
				b.WriteString(" ")
			}
			cond := "ready"
			switch {
			case e.terminating:
				cond = "terminating"
			case !e.ready:
				cond = "not-ready"
			}
			fmt.Fprintf(&b, "%s/%s/%s/%s", e.ip, e.node, cond, cmp.Or(e.pod, "no-pod"))
		}
		b.WriteString("]")
	}
	return b.String()
}

// diffMatrix generates the services, the same for a seed.
func diffMatrix(seed uint64, n int) []diffService {
	r := rand.New(rand.NewPCG(seed, seed))
	// Drawn apart, so that adding a dimension leaves the others' draws.
	dual := rand.New(rand.NewPCG(seed, seed+1))
	var out []diffService
	for i := range n {
		s := diffService{name: fmt.Sprintf("s%02d", i), headless: r.IntN(6) == 0, dualStack: dual.IntN(4) == 0, endpoints: map[string][]diffEndpoint{}}
		s.ports = []corev1.ServicePort{{Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP}}
		if r.IntN(3) == 0 {
			s.ports = append(s.ports, corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP})
		}
		for ci, site := range diffSites {
			// Every service is in some cluster: the last takes it when no
			// other did.
			if last := ci == len(diffSites)-1 && len(s.endpoints) == 0; r.IntN(4) == 0 && !last {
				continue
			}
			var eps []diffEndpoint
			for j := range r.IntN(4) {
				e := diffEndpoint{ip: fmt.Sprintf("10.%d.%d.%d", ci+1, i, j+1), node: diffNodes[r.IntN(len(diffNodes))].name}
				switch c := r.IntN(20); {
				case c < 12:
					e.ready, e.serving = true, true
				case c < 15:
				default:
					e.serving, e.terminating = true, true
				}
				switch c := r.IntN(20); {
				case c < 12:
					e.pod = "mtls"
				case c < 17:
					e.pod = "plain"
				}
				eps = append(eps, e)
			}
			s.endpoints[site.id] = eps
		}
		out = append(out, s)
	}
	return out
}

// install sets up a site of the matrix: the system namespace carrying
// its network, demo, the nodes, its east-west gateway if it has one, and
// the services its endpoints belong to, exported, with their pods. For
// ambient, as Istio's ambient multicluster wants them: services global
// (istio.io/global) with fixed ClusterIPs (two clusters hold east alike),
// the pods that take mTLS captured by ztunnel rather than injected, and
// the gateway an HBONE east-west Gateway; for sidecars, a LoadBalancer
// Service with the mTLS port 15443.
func (s diffSite) install(t *testing.T, c *kubetest.Cluster, services []diffService, ambient bool) {
	t.Helper()
	ctx := t.Context()
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
	switch {
	case ambient:
		c.InstallGatewayAPI(t)
		if s.gateway != "" {
			hboneGateway(t, c, s.network, s.gateway)
		}
	case s.gateway != "":
		gw, err := c.Client.CoreV1().Services(istiodtest.SystemNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-eastwestgateway", Namespace: istiodtest.SystemNamespace, Labels: map[string]string{istiodtest.NetworkLabel: s.network}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{
				Name: "tls", Port: 15443, TargetPort: intstr.FromInt32(15443), Protocol: corev1.ProtocolTCP,
			}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gw.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: s.gateway}}
		if _, err := c.Client.CoreV1().Services(istiodtest.SystemNamespace).UpdateStatus(ctx, gw, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, svc := range services {
		eps, ok := svc.endpoints[s.id]
		if !ok {
			continue
		}
		labels := map[string]string{"meshfed.io/export": "true"}
		spec := corev1.ServiceSpec{Selector: map[string]string{"app": svc.name}, Ports: svc.ports}
		if ambient {
			labels["istio.io/global"] = "true"
			spec.ClusterIP = fmt.Sprintf("10.0.0.%d", 20+i)
		}
		if svc.headless {
			spec.ClusterIP = corev1.ClusterIPNone
		}
		if svc.dualStack {
			spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		}
		if _, err := c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc.name, Namespace: "demo", Labels: labels},
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
				diffPod(t, c, name, svc, e, ambient)
				ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: name}
			}
			slice.Endpoints = append(slice.Endpoints, ep)
		}
		if _, err := c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if !svc.dualStack {
			continue
		}
		v6 := slice.DeepCopy()
		v6.Name, v6.AddressType = svc.name+"-2", discoveryv1.AddressTypeIPv6
		for j := range v6.Endpoints {
			v6.Endpoints[j].Addresses = []string{eps[j].ipv6()}
		}
		if _, err := c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, v6, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// diffPod creates the pod behind an endpoint of svc: one that takes mTLS
// is injected (Istio's injector labels it) or, for ambient, captured by
// ztunnel (istio-cni annotates it).
func diffPod(t *testing.T, c *kubetest.Cluster, name string, svc diffService, e diffEndpoint, ambient bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{"app": svc.name}},
		Spec: corev1.PodSpec{NodeName: e.node, ServiceAccountName: svc.name, Containers: []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8000},
		}}}},
	}
	switch {
	case e.pod == "mtls" && ambient:
		pod.Annotations = map[string]string{"ambient.istio.io/redirection": "enabled"}
	case e.pod == "mtls":
		pod.Labels["security.istio.io/tlsMode"] = "istio"
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
	if svc.dualStack {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: e.ipv6()})
	}
	if _, err := pods.UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// localityRule turns on istiod's locality load balancing for a service
// (outlier detection is what enables it), so that its priorities can be
// compared with the hub's, which it uses by default.
func localityRule(t *testing.T, c *kubetest.Cluster, svc string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
		"metadata": map[string]any{"name": svc, "namespace": "demo"},
		"spec": map[string]any{
			"host": svc + ".demo.svc.cluster.local",
			"trafficPolicy": map[string]any{
				"outlierDetection": map[string]any{"consecutive5xxErrors": int64(5), "interval": "10s", "baseEjectionTime": "30s"},
				"loadBalancer":     map[string]any{"localityLbSetting": map[string]any{"enabled": true}},
			},
		},
	}}
	if err := c.CRClient.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
}

// diffProxy is a position a proxy takes.
type diffProxy struct {
	name  string
	proxy istiodtest.Proxy
}

var diffProxies = []diffProxy{
	{"east-r1-z1", istiodtest.Proxy{IP: "10.1.255.1", Pod: "client-a", Namespace: "demo", ClusterID: "east", Network: "net-east", Locality: &corev3.Locality{Region: "r1", Zone: "z1"}}},
	{"east-r2-z3", istiodtest.Proxy{IP: "10.1.255.2", Pod: "client-b", Namespace: "demo", ClusterID: "east", Network: "net-east", Locality: &corev3.Locality{Region: "r2", Zone: "z3"}}},
	{"east-no-locality", istiodtest.Proxy{IP: "10.1.255.3", Pod: "client-c", Namespace: "demo", ClusterID: "east", Network: "net-east"}},
	{"west-r1-z1", istiodtest.Proxy{IP: "10.3.255.1", Pod: "client-d", Namespace: "demo", ClusterID: "west", Network: "net-west", Locality: &corev3.Locality{Region: "r1", Zone: "z1"}}},
	{"north-r1-z2", istiodtest.Proxy{IP: "10.4.255.1", Pod: "client-e", Namespace: "demo", ClusterID: "north", Network: "net-north", Locality: &corev3.Locality{Region: "r1", Zone: "z2"}}},
	// No CLUSTER_ID, no NETWORK, no locality: every endpoint with a
	// network of its own is behind a gateway, for both.
	{"no-metadata", istiodtest.Proxy{IP: "10.9.255.1", Pod: "client-f", Namespace: "demo"}},
	// Proxyless gRPC clients: istiod's gRPC generator, the hub's gRPC
	// view.
	{"grpc-east-r1-z1", istiodtest.Proxy{IP: "10.1.255.4", Pod: "client-g", Namespace: "demo", ClusterID: "east", Network: "net-east", Locality: &corev3.Locality{Region: "r1", Zone: "z1"}, Proxyless: true}},
	{"grpc-west-r1-z1", istiodtest.Proxy{IP: "10.3.255.2", Pod: "client-h", Namespace: "demo", ClusterID: "west", Network: "net-west", Locality: &corev3.Locality{Region: "r1", Zone: "z1"}, Proxyless: true}},
}

// normalEntry is an endpoint of an assignment after normalisation.
type normalEntry struct {
	address  string
	priority uint32
	locality string // "*" for a gateway
	weight   uint64
}

func (e normalEntry) String() string {
	return fmt.Sprintf("%s p%d %s w%d", e.address, e.priority, e.locality, e.weight)
}

// normalise reduces an assignment to what the two must agree on:
//
//   - entries that take no new traffic are dropped: istiod's UNHEALTHY
//     (not-ready endpoints) and the hub's DRAINING (terminating ones that
//     still serve, for Envoy to drain); see deliberateDifferences;
//   - a gateway's entries in one priority are merged into one, of their
//     summed weight, in no locality: istiod repeats a gateway in each
//     locality it stands for, the hub lists it once;
//   - priorities are renumbered from 0 in order; for a proxy with no
//     locality they are dropped (istiod prefers unlabelled endpoints);
//   - weights are divided by their greatest common divisor (the hub
//     scales every weight so that gateways split evenly);
//   - metadata and locality weights are not compared: each is derived
//     from the rest, and their metadata keys are each server's own.
func normalise(cla *endpointv3.ClusterLoadAssignment, gateways map[string]bool, noLocality bool) []normalEntry {
	merged := map[[2]string]*normalEntry{}
	for _, e := range istiodtest.Endpoints(cla) {
		if e.Health != corev3.HealthStatus_HEALTHY && e.Health != corev3.HealthStatus_UNKNOWN {
			continue
		}
		host, _, _ := net.SplitHostPort(e.Address)
		loc := e.Locality
		if gateways[host] {
			loc = "*"
		}
		p := e.Priority
		if noLocality {
			p = 0
		}
		k := [2]string{e.Address, strconv.Itoa(int(p)) + "/" + loc}
		if m := merged[k]; m != nil {
			m.weight += uint64(max(e.Weight, 1))
			continue
		}
		merged[k] = &normalEntry{address: e.Address, priority: p, locality: loc, weight: uint64(max(e.Weight, 1))}
	}
	out := make([]normalEntry, 0, len(merged))
	for _, e := range merged {
		out = append(out, *e)
	}
	renormalise(out)
	slices.SortFunc(out, func(a, b normalEntry) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), strings.Compare(a.address, b.address), strings.Compare(a.locality, b.locality))
	})
	return out
}

// renormalise renumbers the entries' priorities from 0, in order, and
// divides their weights by their greatest common divisor.
func renormalise(entries []normalEntry) {
	var g uint64
	prios := map[uint32]bool{}
	for _, e := range entries {
		g = gcd(g, e.weight)
		prios[e.priority] = true
	}
	order := slices.Sorted(maps.Keys(prios))
	for i := range entries {
		entries[i].weight /= max(g, 1)
		entries[i].priority = uint32(slices.Index(order, entries[i].priority))
	}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// deliberateDifference is a difference the test expects, and why.
type deliberateDifference struct {
	name, why string
	// explain removes from what each server sent for a case (both
	// normalised) what the difference explains, and reports whether it
	// removed anything. It may refuse (ok false) when what it would
	// explain is not as the reason says.
	explain func(m diffIndex, c diffCase, istiod, meshfed []normalEntry) (istiodOut, meshfedOut []normalEntry, ok bool)
}

// diffCase is one cluster (service port) seen by one proxy.
type diffCase struct {
	proxy   diffProxy
	cluster string
	service diffService
}

// diffIndex finds the matrix's endpoints and sites by address.
type diffIndex map[string]struct {
	site diffSite
	e    diffEndpoint
}

func indexMatrix(services []diffService) diffIndex {
	m := diffIndex{}
	for _, s := range services {
		for _, site := range diffSites {
			for _, e := range s.endpoints[site.id] {
				x := struct {
					site diffSite
					e    diffEndpoint
				}{site, e}
				m[e.ip] = x
				if s.dualStack {
					m[e.ipv6()] = x
				}
			}
		}
	}
	return m
}

func hostOf(address string) string {
	h, _, _ := net.SplitHostPort(address)
	return h
}

// without returns the entries drop does not match, priorities renumbered
// and weights divided by their GCD again, and whether it dropped any.
func without(entries []normalEntry, drop func(normalEntry) bool) ([]normalEntry, bool) {
	var kept []normalEntry
	for _, e := range entries {
		if !drop(e) {
			kept = append(kept, e)
		}
	}
	if len(kept) == len(entries) {
		return entries, false
	}
	renormalise(kept)
	return kept, true
}

// deliberateDifferences are every difference between istiod's EDS and the
// hub's that the test accepts, each with its reason; docs/eds.md lists
// them for users. They are tried in order, each on what the previous left.
var deliberateDifferences = []deliberateDifference{
	{
		name: "network without a gateway",
		why: "istiod (sidecar mode) sends the endpoints of another network that has no east-west gateway as if they were on the proxy's own, " +
			"which works only where the networks are in fact one; the hub sends none, as istiod's ambient mode does",
		explain: func(m diffIndex, c diffCase, istiod, meshfed []normalEntry) ([]normalEntry, []normalEntry, bool) {
			a, ok := without(istiod, func(e normalEntry) bool {
				x, known := m[hostOf(e.address)]
				return known && x.site.network != c.proxy.proxy.Network && x.site.gateway == ""
			})
			return a, meshfed, ok
		},
	},
	{
		name: "locality of an endpoint with no pod",
		why: "istiod reads an endpoint's locality from its pod's node, so an endpoint with no pod (no targetRef) has none; " +
			"the hub reads it from the EndpointSlice's nodeName (or zone), which is where the endpoint is",
		explain: func(m diffIndex, _ diffCase, istiod, meshfed []normalEntry) ([]normalEntry, []normalEntry, bool) {
			drop := func(e normalEntry) bool {
				x, known := m[hostOf(e.address)]
				return known && x.e.pod == "" && x.e.node != "n-none"
			}
			a, okA := without(istiod, drop)
			b, okB := without(meshfed, drop)
			return a, b, okA || okB
		},
	},
	{
		name: "what a gateway stands for",
		why: "istiod counts, in the weight of another network's gateway, every endpoint there that takes mTLS, ready, not ready or terminating, " +
			"and so sends a healthy gateway for a network with nothing ready; the hub counts the ready ones, or when none is the terminating ones that " +
			"still serve (the gateway then DRAINING), and sends no gateway for a network with neither",
		explain: func(_ diffIndex, c diffCase, istiod, meshfed []normalEntry) ([]normalEntry, []normalEntry, bool) {
			isGateway := func(e normalEntry) bool { return e.locality == "*" }
			// The hub's gateway into west is there exactly when west has a
			// ready endpoint that takes mTLS, for a proxy on another
			// network.
			want := false
			for _, site := range diffSites {
				if site.gateway == "" || site.network == c.proxy.proxy.Network {
					continue
				}
				for _, e := range c.service.endpoints[site.id] {
					want = want || e.ready && e.pod == "mtls"
				}
			}
			if slices.ContainsFunc(meshfed, isGateway) != want {
				return nil, nil, false
			}
			a, okA := without(istiod, isGateway)
			b, okB := without(meshfed, isGateway)
			return a, b, okA || okB
		},
	},
	{
		name: "headless services",
		why:  "istiod gives a headless service an ORIGINAL_DST cluster and no EDS; the hub serves its endpoints by EDS, for gRPC clients, which have no ORIGINAL_DST",
		explain: func(_ diffIndex, c diffCase, istiod, _ []normalEntry) ([]normalEntry, []normalEntry, bool) {
			return nil, nil, c.service.headless && len(istiod) == 0
		},
	},
}

// TestEDSMatchesIstiod compares istiod's EDS with the hub's for every
// service port of a generated matrix and every proxy position, on four
// real API servers.
func TestEDSMatchesIstiod(t *testing.T) {
	istiodtest.RequireBinary(t)
	services := diffMatrix(diffSeed(t), 16)
	for _, s := range services {
		t.Logf("%s", s)
	}
	clusters := kubetest.Start(t, len(diffSites))
	for i, s := range diffSites {
		s.install(t, clusters[i], services, false)
	}
	east := clusters[0]
	east.InstallDestinationRules(t)
	for _, s := range services {
		localityRule(t, east, s.name)
	}
	for i, s := range diffSites[1:] {
		kubeconfig, err := os.ReadFile(clusters[i+1].Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		remoteSecret(t, east, s.id, kubeconfig)
	}
	d := istiodtest.Start(t, east, istiodtest.Options{
		ClusterID: "east", Network: "net-east",
		Env: []string{"PILOT_DEBOUNCE_AFTER=10ms", "PILOT_DEBOUNCE_MAX=100ms"},
	})

	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = freeAddr(t), freeAddr(t), ""
	h := runHub(t, cfg)
	for i, s := range diffSites {
		sc := spoke.DefaultConfig()
		sc.ClusterID, sc.Network, sc.Kubeconfig, sc.InCluster = s.id, s.network, clusters[i].Kubeconfig, false
		sc.Hub, sc.Insecure = h.FederationAddr().String(), true
		runSpokeWith(t, sc)
	}

	gateways := map[string]bool{}
	for _, s := range diffSites {
		if s.gateway != "" {
			gateways[s.gateway] = true
		}
	}
	var cases []diffCase
	for _, p := range diffProxies {
		for _, s := range services {
			for _, port := range s.ports {
				cases = append(cases, diffCase{proxy: p, cluster: fmt.Sprintf("outbound|%d||%s.demo.svc.cluster.local", port.Port, s.name), service: s})
			}
		}
	}
	index := indexMatrix(services)
	istiods, hubs := map[string]*istiodtest.ADSClient{}, map[string]*istiodtest.ADSClient{}
	for _, p := range diffProxies {
		istiods[p.name] = istiodtest.Dial(t, d.XDSAddr, p.proxy)
		hubs[p.name] = istiodtest.Dial(t, cfg.XDSAddr, p.proxy)
	}

	// Each server's clusters, and the assignment of each EDS one: then
	// both have sent something for every case.
	for _, c := range cases {
		for _, ads := range []*istiodtest.ADSClient{istiods[c.proxy.name], hubs[c.proxy.name]} {
			if cl := ads.WaitCluster(t, c.cluster); cl.GetType() == clusterv3.Cluster_EDS {
				ads.WaitEDS(t, c.cluster, func(cla *endpointv3.ClusterLoadAssignment) bool { return cla != nil })
			}
		}
	}

	// Both converge: wait until every case agrees or is explained, then
	// report what remains.
	explained := map[string]int{}
	var last []string
	same := 0 // cases with endpoints, equal with no difference explained
	agree := func() bool {
		last = nil
		clear(explained)
		same = 0
		for _, c := range cases {
			noLoc := c.proxy.proxy.Locality == nil
			a := normalise(istiods[c.proxy.name].EDS(c.cluster), gateways, noLoc)
			b := normalise(hubs[c.proxy.name].EDS(c.cluster), gateways, noLoc)
			if slices.Equal(a, b) {
				if len(a) > 0 {
					same++
				}
				continue
			}
			ra, rb := a, b
			var used []string
			for _, dd := range deliberateDifferences {
				if slices.Equal(ra, rb) {
					break
				}
				if na, nb, ok := dd.explain(index, c, ra, rb); ok {
					ra, rb = na, nb
					used = append(used, dd.name)
				}
			}
			if !slices.Equal(ra, rb) {
				last = append(last, fmt.Sprintf("%s, %s:\n  istiod  %v\n  meshfed %v\n  after %v: %v / %v", c.proxy.name, c.cluster, a, b, used, ra, rb))
				continue
			}
			for _, u := range used {
				explained[u]++
			}
		}
		return len(last) == 0
	}
	if !testwait.Within(2*time.Minute, func() (bool, string) { return agree(), "" }) {
		t.Errorf("%d of %d cases differ beyond the deliberate differences:\n%s", len(last), len(cases), strings.Join(last, "\n"))
	}
	t.Logf("%d cases (%d services × ports, %d proxy positions): %d equal as they are, with endpoints; explained by deliberate differences: %v",
		len(cases), len(cases)/len(diffProxies), len(diffProxies), same, explained)
	for _, dd := range deliberateDifferences {
		if n := explained[dd.name]; n > 0 {
			t.Logf("%s (%d cases): %s", dd.name, n, dd.why)
		}
	}
	// A matrix where nothing is compared proves nothing.
	if same < 10 {
		t.Errorf("only %d of %d cases had endpoints and agreed as they are: the matrix compares too little", same, len(cases))
	}
}
