package remoteview

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/imports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	east = &federationpb.Cluster{Id: "east", Network: "net-east"}
	west = &federationpb.Cluster{Id: "west", Network: "net-west", TrustDomain: "west.example", Gateways: []*federationpb.Gateway{
		{Address: "192.0.2.50", Port: 15008, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE, Service: "istio-system/istio-eastwestgateway"},
		{Address: "192.0.2.51", Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, Service: "istio-system/istio-eastwestgateway"},
	}}
)

// echoImport is demo/echo as the hub sends it to east: west's source
// behind its gateway, with west's own view of the service.
func echoImport() *federationpb.Import {
	port := []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}}
	ep := func(addr, pod string, ready bool) *federationpb.Endpoint {
		return &federationpb.Endpoint{
			Namespace: "demo", Service: "echo", Address: addr, Ports: port, Ready: ready, Serving: ready, Node: "node-1",
			Locality: &federationpb.Locality{Region: "r1", Zone: "z-west"}, Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: pod, Uid: "uid-" + pod},
		}
	}
	return &federationpb.Import{
		Namespace: "demo", Name: "echo", Type: federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP, Clusters: []string{"east", "west"},
		Labels: []*federationpb.KeyValue{{Key: "team", Value: "a"}},
		Sources: []*federationpb.ImportSource{
			{Cluster: "east", Network: "net-east", ClusterIps: []string{"10.0.0.100"}, ClusterEndpoints: []*federationpb.Endpoint{ep("10.1.0.1", "echo-e", true)}},
			{
				Cluster: "west", Network: "net-west", ViaGateway: true, ClusterIps: []string{"10.0.0.200"},
				ClusterPorts:     []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, TargetPortName: "grpc-port"}},
				ClusterEndpoints: []*federationpb.Endpoint{ep("10.2.0.1", "echo-a", true), ep("10.2.0.2", "echo-b", false)},
				Workloads: []*federationpb.Workload{
					{Uid: "uid-echo-a", Namespace: "demo", Name: "echo-a", Ips: []string{"10.2.0.1"}, ServiceAccount: "echo", Node: "node-1", Locality: &federationpb.Locality{Region: "r1", Zone: "z-west"}, App: "echo", CanonicalName: "echo", Ready: true, Ambient: true},
					{Uid: "uid-echo-b", Namespace: "demo", Name: "echo-b", Ips: []string{"10.2.0.2"}, ServiceAccount: "echo", Node: "node-1", App: "echo", MeshTls: true},
				},
			},
		},
	}
}

// names lists objects by namespace/name (name alone when cluster-scoped).
func names[T metav1.Object](objs []T) []string {
	var out []string
	for _, o := range objs {
		out = append(out, strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/"))
	}
	return out
}

func set(clusters ...*federationpb.Cluster) *imports.Set {
	return &imports.Set{Hub: "hub-a", Imports: map[string]*federationpb.Import{"demo/echo": echoImport()}, Clusters: clusters}
}

// TestBuild: a member's view holds what it exports as its own API would,
// and the receiver has no view of itself.
func TestBuild(t *testing.T) {
	views := Build(set(east, west), "east", nil)
	if len(views) != 1 || views["west"] == nil {
		t.Fatalf("views of %v, want west's alone", slices.Collect(maps.Keys(views)))
	}
	v := views["west"]
	if got := names(v.Namespaces); !slices.Equal(got, []string{"demo", "istio-system"}) {
		t.Errorf("namespaces %v", got)
	}
	if v.Namespaces[1].Labels[LabelNetwork] != "net-west" {
		t.Errorf("istio-system's labels %v, want west's network", v.Namespaces[1].Labels)
	}
	if got := names(v.Pods); !slices.Equal(got, []string{"demo/echo-a", "demo/echo-b"}) {
		t.Errorf("pods %v", got)
	}
	if got := names(v.Nodes); !slices.Equal(got, []string{"node-1"}) || v.Nodes[0].Labels[corev1.LabelTopologyZone] != "z-west" {
		t.Errorf("nodes %v %v", got, v.Nodes[0].Labels)
	}
	svc := v.Services[0]
	wantSpec := corev1.ServiceSpec{
		Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.200", ClusterIPs: []string{"10.0.0.200"},
		Selector: map[string]string{selectorLabel("echo"): "true"},
		Ports:    []corev1.ServicePort{{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromString("grpc-port")}},
		// As an API server defaults them: istiod reads the families.
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
	}
	if diff := cmp.Diff(wantSpec, svc.Spec); diff != "" || svc.Labels[LabelGlobal] != "true" || svc.Labels["team"] != "a" {
		t.Errorf("west's echo (-want +got):\n%s\nlabels %v", diff, svc.Labels)
	}
	a, b := v.Pods[0], v.Pods[1]
	if a.Labels[selectorLabel("echo")] != "true" || a.Annotations["ambient.istio.io/redirection"] != "enabled" || a.Spec.ServiceAccountName != "echo" ||
		a.Status.PodIP != "10.2.0.1" || a.Status.Conditions[0].Status != corev1.ConditionTrue || string(a.UID) != "uid-echo-a" {
		t.Errorf("echo-a %+v", a)
	}
	if b.Annotations != nil || b.Labels["security.istio.io/tlsMode"] != "istio" || b.Status.Conditions[0].Status != corev1.ConditionFalse {
		t.Errorf("echo-b: annotations %v labels %v conditions %v", b.Annotations, b.Labels, b.Status.Conditions)
	}
	if ports := a.Spec.Containers[0].Ports; len(ports) != 1 || ports[0].Name != "grpc-port" || ports[0].ContainerPort != 9090 {
		t.Errorf("echo-a's container ports %v, want grpc-port 9090 (the named target port)", ports)
	}
	if len(v.EndpointSlices) != 1 || len(v.EndpointSlices[0].Endpoints) != 2 || *v.EndpointSlices[0].Endpoints[1].Conditions.Ready ||
		v.EndpointSlices[0].Endpoints[0].TargetRef.Name != "echo-a" {
		t.Errorf("slices %+v", v.EndpointSlices)
	}
	if len(v.Gateways) != 1 {
		t.Fatalf("gateways %v, want the HBONE one alone", v.Gateways)
	}
	gw := v.Gateways[0]
	if gw.Namespace != "istio-system" || gw.Name != "istio-eastwestgateway" || gw.Spec.GatewayClassName != EastWestClass ||
		gw.Labels[LabelNetwork] != "net-west" || gw.Spec.Listeners[0].Protocol != "HBONE" || gw.Spec.Listeners[0].Port != 15008 ||
		gw.Status.Addresses[0].Value != "192.0.2.50" {
		t.Errorf("gateway %+v", gw)
	}
	if len(v.ConfigMaps) != 1 || v.ConfigMaps[0].Data["mesh"] != "trustDomain: west.example\n" {
		t.Errorf("mesh config %v", v.ConfigMaps)
	}

	// A member the hub no longer lists has no view; nor does any without
	// the hub's clusters.
	if views := Build(set(east), "east", nil); len(views) != 0 {
		t.Errorf("views %v after west went", views)
	}
	if views := Build(set(), "east", nil); len(views) != 0 {
		t.Errorf("views %v without clusters", views)
	}
}

// TestServer: the views answer once a set came, only to a client with the
// token, under /clusters/<member>/; a member that goes loses its view.
func TestServer(t *testing.T) {
	// Over HTTPS: Kubernetes clients send no token over HTTP.
	certs := t.TempDir()
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	serving, err := pki.ServerOnlyConfig(filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key"), log)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(certs, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	store := imports.NewStore()
	reg := prometheus.NewRegistry()
	s, err := NewServer(Config{Addr: "127.0.0.1:0", Cluster: "east", Token: "s3cret", TLS: serving, Metrics: reg}, store, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	base := "https://" + s.Addr().String()
	get := func(path, token string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		path, token string
		code        int
		says        string
	}{
		{"/clusters/west/api/v1/pods", "", http.StatusUnauthorized, "Unauthorized"},
		{"/clusters/west/api/v1/pods", "wrong", http.StatusUnauthorized, "Unauthorized"},
		{"/clusters/west/api/v1/pods", "s3cret", http.StatusServiceUnavailable, "not heard from the hub"},
	} {
		if code, body := get(tc.path, tc.token); code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("GET %s with %q: %d %s, want %d saying %q", tc.path, tc.token, code, body, tc.code, tc.says)
		}
	}

	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("get", "401")); got != 2 {
		t.Errorf("requests counted as 401: %v, want 2", got)
	}
	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("get", "503")); got != 1 {
		t.Errorf("requests counted as 503: %v, want 1", got)
	}
	link := store.Link("hub-a")
	link.Start()
	_, changed := s.Members()
	link.Received(&federationpb.Imports{Version: 1, Full: true, Imports: []*federationpb.Import{echoImport()}, Clusters: []*federationpb.Cluster{east, west}})
	<-changed
	if members, _ := s.Members(); !slices.Equal(members, []federation.ClusterID{"west"}) || testutil.ToFloat64(s.metrics.members) != 1 {
		t.Errorf("members %v (gauge %v)", members, testutil.ToFloat64(s.metrics.members))
	}
	c := kubernetes.NewForConfigOrDie(&rest.Config{Host: base + "/clusters/west", BearerToken: "s3cret", TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	testwait.ForState(t, "west's pods", func() (bool, string) {
		pods, err := c.CoreV1().Pods("demo").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 2, fmt.Sprint(len(pods.Items))
	})
	if code, body := get("/clusters/north/api/v1/pods", "s3cret"); code != http.StatusNotFound || !strings.Contains(body, "not a member") {
		t.Errorf("an unknown member: %d %s", code, body)
	}
	if code, _ := get("/api/v1/pods", "s3cret"); code != http.StatusNotFound {
		t.Errorf("no member in the path: %d", code)
	}

	_, changed = s.Members()
	link.Received(&federationpb.Imports{Version: 2, Clusters: []*federationpb.Cluster{east}})
	<-changed
	// West's view stays, empty: istiod's informers see its objects go.
	if members, _ := s.Members(); len(members) != 0 {
		t.Errorf("members %v after west went", members)
	}
	// The member set changes before the view is emptied: wait for it.
	testwait.ForState(t, "west's view emptied", func() (bool, string) {
		pods, err := c.CoreV1().Pods("demo").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprint(len(pods.Items))
	})
}

// TestTouched: the members whose views a later set changes: an import's
// sources, before and after, and a member whose cluster changed.
func TestTouched(t *testing.T) {
	prev := set(east, west)
	if got := Touched(nil, prev); got != nil {
		t.Errorf("without a previous set: %v, want every member (nil)", got)
	}
	same := &imports.Set{Imports: maps.Clone(prev.Imports), Clusters: prev.Clusters}
	if got := Touched(prev, same); len(got) != 0 {
		t.Errorf("the same imports and clusters touched %v", got)
	}
	replaced := &imports.Set{Imports: map[string]*federationpb.Import{"demo/echo": echoImport()}, Clusters: prev.Clusters}
	if got := Touched(prev, replaced); !maps.Equal(got, map[federation.ClusterID]bool{"east": true, "west": true}) {
		t.Errorf("echo replaced touched %v, want its sources east and west", got)
	}
	moved := proto.Clone(west).(*federationpb.Cluster)
	moved.Gateways[0].Address = "192.0.2.60"
	regatewayed := &imports.Set{Imports: prev.Imports, Clusters: []*federationpb.Cluster{east, moved}}
	if got := Touched(prev, regatewayed); !maps.Equal(got, map[federation.ClusterID]bool{"west": true}) {
		t.Errorf("west's gateway moved touched %v, want west", got)
	}
}

// BenchmarkUpdate: one import of 500 changes in a clusterset of ten
// members, each exporting 100 services of 10 pods: the views of its two
// sources are rebuilt, or (every) all ten.
func BenchmarkUpdate(b *testing.B) {
	var clusters []*federationpb.Cluster
	for m := range 10 {
		clusters = append(clusters, &federationpb.Cluster{Id: fmt.Sprintf("m%d", m), Network: "net"})
	}
	source := func(m, svc, gen int) *federationpb.ImportSource {
		src := &federationpb.ImportSource{Cluster: fmt.Sprintf("m%d", m), ClusterIps: []string{fmt.Sprintf("10.0.%d.%d", m, svc%250)}}
		for p := range 10 {
			uid := fmt.Sprintf("m%d-s%d-p%d-%d", m, svc, p, gen)
			src.ClusterEndpoints = append(src.ClusterEndpoints, &federationpb.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", m, svc, p), Ready: true, Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: uid, Uid: uid}})
			src.Workloads = append(src.Workloads, &federationpb.Workload{Uid: uid, Namespace: "demo", Name: uid, Ips: []string{fmt.Sprintf("10.%d.%d.%d", m, svc, p)}})
		}
		return src
	}
	base := &imports.Set{Imports: map[string]*federationpb.Import{}, Clusters: clusters}
	for svc := range 500 {
		im := &federationpb.Import{Namespace: "demo", Name: fmt.Sprintf("svc-%d", svc)}
		for _, m := range []int{svc % 10, (svc + 1) % 10} {
			im.Sources = append(im.Sources, source(m, svc, 0))
		}
		base.Imports["demo/"+im.Name] = im
	}
	for _, every := range []bool{false, true} {
		b.Run(fmt.Sprintf("every=%v", every), func(b *testing.B) {
			s := &Server{cfg: Config{Cluster: "self"}, log: slog.New(slog.DiscardHandler), metrics: newViewMetrics(nil), changed: make(chan struct{})}
			s.update(base)
			prev := base
			for gen := 1; b.Loop(); gen++ {
				next := &imports.Set{Imports: maps.Clone(prev.Imports), Clusters: clusters}
				next.Imports["demo/svc-0"] = &federationpb.Import{Namespace: "demo", Name: "svc-0", Sources: []*federationpb.ImportSource{source(0, 0, gen), source(1, 0, gen)}}
				if every {
					s.last = nil
				}
				s.update(next)
				prev = next
			}
		})
	}
}

func TestIPFamilies(t *testing.T) {
	for _, tc := range []struct {
		ips      []string
		imported []federationpb.IPFamily
		want     []corev1.IPFamily
	}{
		{[]string{"10.0.0.1"}, nil, []corev1.IPFamily{corev1.IPv4Protocol}},
		{[]string{"fd00::1", "10.0.0.1"}, nil, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}},
		{nil, []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV6}, []corev1.IPFamily{corev1.IPv6Protocol}},
		{[]string{corev1.ClusterIPNone}, nil, []corev1.IPFamily{corev1.IPv4Protocol}},
	} {
		got, policy := ipFamilies(tc.ips, tc.imported)
		wantPolicy := corev1.IPFamilyPolicySingleStack
		if len(tc.want) > 1 {
			wantPolicy = corev1.IPFamilyPolicyRequireDualStack
		}
		if !slices.Equal(got, tc.want) || *policy != wantPolicy {
			t.Errorf("%v %v: %v %v, want %v %v", tc.ips, tc.imported, got, *policy, tc.want, wantPolicy)
		}
	}
}
