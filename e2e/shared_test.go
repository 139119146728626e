// The helpers that tests of more than one kind use (see doc.go: the kinds
// are build tags): fleets and backends, clients, processes, scale.

package e2e

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/meshfed/meshfed/examples/demo"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/echo"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke"
	"github.com/meshfed/meshfed/spoke/normalize"
)

const echoCluster = "outbound|8080||echo.demo.svc.cluster.local"

func adsClient(t *testing.T, addr string) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return discovery.NewAggregatedDiscoveryServiceClient(conn)
}

// deltaStream is a delta ADS client that records what it was sent.
type deltaStream struct {
	t *testing.T
	s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
}

func openDelta(t *testing.T, addr string) *deltaStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	s, err := adsClient(t, addr).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &deltaStream{t: t, s: s}
}

func (d *deltaStream) send(req *discovery.DeltaDiscoveryRequest) {
	d.t.Helper()
	if err := d.s.Send(req); err != nil {
		d.t.Fatal(err)
	}
}

func (d *deltaStream) recv() *discovery.DeltaDiscoveryResponse {
	d.t.Helper()
	r, err := d.s.Recv()
	if err != nil {
		d.t.Fatal(err)
	}
	return r
}

func (d *deltaStream) ack(r *discovery.DeltaDiscoveryResponse) {
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

// backend is a stand-in pod: an echo server on its own loopback address.
type backend struct {
	addr string
	port uint32
}

func startBackend(t *testing.T, ip, cluster string) backend {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s (needs the 127.0.0.0/8 loopback range): %v", ip, err)
	}
	runInBackground(t, func(ctx context.Context) error { return echo.Serve(ctx, lis, cluster) })
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	p, _ := strconv.Atoi(port)
	return backend{addr: ip, port: uint32(p)}
}

// xdsClient dials xds:///echo.demo.svc.cluster.local:8080 through the hub
// with grpc-go's own xDS resolver, as a proxy of cluster/network/zone.
func xdsClient(t *testing.T, xdsAddr, id, cluster, network, region, zone string) healthpb.HealthClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["ignore_resource_deletion"]}],
		"node": {"id": %q, "locality": {"region": %q, "zone": %q}, "metadata": {"CLUSTER_ID": %q, "NETWORK": %q}}
	}`, xdsAddr, id, region, zone, cluster, network)
	return xdsClientWith(t, bootstrap)
}

// eventually calls until every one of n calls is served by want.
func eventually(t *testing.T, c healthpb.HealthClient, want string) {
	t.Helper()
	const limit = 30 * time.Second
	var last map[string]int
	allTo := func() (bool, string) {
		got, err := servedBy(t.Context(), c, 10)
		last = got
		return err == nil && got[want] == 10, ""
	}
	if !testwait.Within(limit, allTo) {
		t.Fatalf("calls did not all go to %s within %v; last round: %v", want, limit, last)
	}
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	certs := t.TempDir()
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east", "west"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	cfg := hub.DefaultConfig()
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key"), filepath.Join(certs, "ca.crt")
	h, err := hub.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, h.Run)
	return &fleet{hub: h, certs: certs}
}

func runInBackground(t *testing.T, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

// copyDemo writes the embedded demo manifests into a new directory.
func copyDemo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(demo.Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := demo.Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// freeAddr returns a loopback address nothing listens on, for a process to
// listen on; no other freeAddr or listenLoopback of the run gets it. Its
// port is below the kernel's ephemeral range, which a listener on port 0
// or an outgoing connection (an istiod's, an API server's) draws from: a
// process that stops and starts again on its address (a restarted hub)
// finds it free.
func freeAddr(t testing.TB) string {
	t.Helper()
	low := ephemeralLow()
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if _, taken := handedOut.LoadOrStore(addr, true); taken {
			continue
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			continue // another test binary's, or a server's
		}
		_ = lis.Close()
		return addr
	}
	t.Fatal("freeAddr: no free loopback port below the ephemeral range")
	return ""
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > 11000 {
				return low
			}
		}
	}
	return 32768
}

// httpGet returns the status and body of GET url; status 0 when nothing
// answers.
func httpGet(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, ""
	}
	return resp.StatusCode, string(body)
}

// pollUntil reports whether cond holds within timeout.
func pollUntil(timeout time.Duration, cond func() bool) bool {
	return testwait.Within(timeout, func() (bool, string) { return cond(), "" })
}

func createNamespace(t testing.TB, c *kubetest.Cluster, name string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// kubeScale is the size of the cluster BenchmarkKubeSpokeScale builds.
type kubeScale struct {
	services, perService, nodes, namespaces int
	// firstPod numbers the cluster's first pod, for its address
	// (scalePodIP): clusters built for one run get disjoint pod IPs.
	firstPod int
	// byLabel exports the services with the label meshfed.io/export
	// instead of a ServiceExport each: federated, but not MCS imports
	// (no ServiceImports written back).
	byLabel bool
}

func (s kubeScale) endpoints() int { return s.services * s.perService }

// scalePopulate creates the cluster's objects with 32 workers and a client
// without rate limits, and returns how many API requests it made.
func scalePopulate(b *testing.B, base *rest.Config, sc kubeScale) int {
	b.Helper()
	ctx := b.Context()
	rc := rest.CopyConfig(base)
	rc.QPS, rc.Burst = 10_000, 20_000
	mcs, err := mcsclientset.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	rc.ContentType = kruntime.ContentTypeProtobuf
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	requests := 0

	// envtest serves ClusterIPs from a /24: a second ServiceCIDR gives
	// room for 5,000 services. The API server allocates from it once it is
	// Ready, which kube-controller-manager (absent here) would report.
	cidr, err := kube.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cidr.Status.Conditions = []metav1.Condition{{
		Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue,
		Reason: "Bench", LastTransitionTime: metav1.Now(),
	}}
	if _, err := kube.NetworkingV1().ServiceCIDRs().UpdateStatus(ctx, cidr, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	requests += 2

	run := func(n int, task func(ctx context.Context, i int) error) {
		g, ctx := errgroup.WithContext(ctx)
		g.SetLimit(32)
		for i := range n {
			g.Go(func() error { return task(ctx, i) })
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	run(sc.namespaces, func(ctx context.Context, i int) error {
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%02d", i)}}, metav1.CreateOptions{})
		return err
	})
	run(sc.nodes, func(ctx context.Context, i int) error {
		_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: scaleNode(i), Labels: map[string]string{
			"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": fmt.Sprintf("z%d", i%3),
		}}}, metav1.CreateOptions{})
		return err
	})
	requests += sc.namespaces + sc.nodes
	// One task per service: the Service, its ServiceExport, its pods (create
	// and status) and its EndpointSlice.
	run(sc.services, func(ctx context.Context, j int) error {
		ns, name := scaleNamespace(j, sc), scaleService(j)
		labels := map[string]string{"app": name}
		var export map[string]string
		if sc.byLabel {
			export = map[string]string{normalize.LabelExport: "true"}
		}
		if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: export},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
				Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP,
			}}},
		}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("service %s/%s: %w", ns, name, err)
		}
		if !sc.byLabel {
			if _, err := mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, &mcsv1alpha1.ServiceExport{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("service export %s/%s: %w", ns, name, err)
			}
		}
		eps := make([]discoveryv1.Endpoint, sc.perService)
		for k := range sc.perService {
			i := j*sc.perService + k
			pod, ip, node := fmt.Sprintf("%s-%d", name, k), scalePodIP(sc.firstPod+i), scaleNode(i%sc.nodes)
			p, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns, Labels: labels},
				Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", ns, pod, err)
			}
			p.Status = corev1.PodStatus{
				Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			}
			if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("pod %s/%s status: %w", ns, pod, err)
			}
			eps[k] = discoveryv1.Endpoint{
				Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				NodeName: ptr.To(node), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod},
			}
		}
		if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)}},
			Endpoints:   eps,
		}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("endpoint slice %s/%s: %w", ns, name, err)
		}
		return nil
	})
	requests += sc.services * (3 + 2*sc.perService)
	return requests
}

func scaleNamespace(svc int, sc kubeScale) string {
	return fmt.Sprintf("bench-%02d", svc%sc.namespaces)
}

func scaleService(svc int) string { return fmt.Sprintf("svc-%04d", svc) }

// procStatusBytes reads fields of /proc/PID/status given in kB (VmRSS,
// RssFile...), in bytes, in the order asked; a field the kernel does not
// report is 0.
func procStatusBytes(b *testing.B, pid int, fields ...string) []int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	out := make([]int64, len(fields))
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		i := slices.Index(fields, k)
		if !ok || i < 0 {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/status: %s: %v", pid, k, err)
		}
		out[i] = kb << 10
	}
	return out
}

// runSpokeWith runs a spoke until the returned stop is called (or the
// test ends).
func runSpokeWith(t *testing.T, cfg spoke.Config) (stop func()) {
	t.Helper()
	s, err := spoke.New(t.Context(), cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("spoke %s: %v", cfg.ClusterID, err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// kubeEcho creates, in one cluster, namespace demo, nodes, and an echo
// service with a ServiceExport and pods behind an EndpointSlice.
func kubeEcho(t *testing.T, c *kubetest.Cluster, zone string, ips ...string) {
	t.Helper()
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{})
	must(err)
	_, err = c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": zone,
	}}}, metav1.CreateOptions{})
	must(err)
	_, err = c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"}, Ports: []corev1.ServicePort{{
			Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Create(ctx, &mcsv1alpha1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo"},
	}, metav1.CreateOptions{})
	must(err)
	var eps []discoveryv1.Endpoint
	for i, ip := range ips {
		name := "echo-" + string(rune('a'+i))
		p, err := c.Client.CoreV1().Pods("demo").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{"app": "echo"}},
			Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "echo", Image: "echo"}}},
		}, metav1.CreateOptions{})
		must(err)
		p.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		}
		_, err = c.Client.CoreV1().Pods("demo").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must(err)
		eps = append(eps, discoveryv1.Endpoint{
			Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName: ptr.To("node-1"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: name},
		})
	}
	_, err = c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}, metav1.CreateOptions{})
	must(err)
}

// runHub runs a hub until its stop is called (or the test ends).
func runHub(t *testing.T, cfg hub.Config) *hubRun {
	t.Helper()
	h, err := hub.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := h.Run(ctx); err != nil {
			t.Errorf("hub: %v", err)
		}
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return &hubRun{Hub: h, stop: stop}
}

// xdsClientWith dials xds:///echo.demo.svc.cluster.local:8080 with grpc-go's
// xDS resolver configured by a bootstrap.
func xdsClientWith(t *testing.T, bootstrap string) healthpb.HealthClient {
	t.Helper()
	return xdsClientOf(t, bootstrap, "echo.demo.svc.cluster.local:8080")
}

// servedBy makes n calls and counts which cluster answered them.
func servedBy(ctx context.Context, c healthpb.HealthClient, n int) (map[string]int, error) {
	out := map[string]int{}
	for range n {
		var md metadata.MD
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.Header(&md), grpc.WaitForReady(true))
		cancel()
		if err != nil {
			return out, err
		}
		out[first(md.Get(echo.HeaderKey))]++
	}
	return out, nil
}

// fleet is a hub with mTLS on loopback and certificates for east and west.
type fleet struct {
	hub   *hub.Hub
	certs string
}

// startSpoke runs a file spoke for cluster with the given certificate.
func (f *fleet) startSpoke(t *testing.T, cluster, network, manifests string) {
	t.Helper()
	cfg := spoke.DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Manifests = cluster, network, manifests
	cfg.Hub, cfg.ServerName = f.hub.FederationAddr().String(), "localhost"
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = filepath.Join(f.certs, cluster+".crt"), filepath.Join(f.certs, cluster+".key"), filepath.Join(f.certs, "ca.crt")
	s, err := spoke.New(t.Context(), cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, s.Run)
}

// handedOut are the loopback addresses freeAddr handed out for processes
// to listen on: none is handed out twice in a run.
var handedOut sync.Map

// listenLoopback listens on a loopback port the kernel picks (in its
// ephemeral range, where freeAddr never hands one out).
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func scaleNode(i int) string { return fmt.Sprintf("node-%03d", i) }

// scalePodIP is pod i's address, in 10.128.0.0/14, clear of the ServiceCIDRs.
func scalePodIP(i int) string {
	j := i + 1
	return fmt.Sprintf("10.%d.%d.%d", 128+j>>16, j>>8&255, j&255)
}

// hubRun is a hub replica running in the test, which it can stop early.
type hubRun struct {
	*hub.Hub
	stop func()
}

// xdsClientOf dials xds:///target with grpc-go's xDS resolver configured
// by a bootstrap.
func xdsClientOf(t *testing.T, bootstrap, target string) healthpb.HealthClient {
	t.Helper()
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
