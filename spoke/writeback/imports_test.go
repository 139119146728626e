package writeback

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/dnstest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/writeback/importwriter"
)

// runImports runs the rig with a write-back that writes the imports of
// store (nil: one the rig's test link feeds, as a hub replica would).
func runImports(t testing.TB, c *kubetest.Cluster, store *imports.Store, opts ...rigOption) *rig {
	t.Helper()
	return run(t, c, append([]rigOption{withImports(store)}, opts...)...)
}

// send gives the store a full set, as a hub replica's link does.
func (r *rig) send(ims ...*federationpb.Import) {
	r.link.Received(&federationpb.Imports{Full: true, Imports: ims})
}

// writes is the number of write requests the writer sent.
func (r *rig) writes(t testing.TB) float64 {
	t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() == "meshfed_spoke_import_writes_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func (r *rig) gauge(t *testing.T, name string) float64 {
	t.Helper()
	families, err := r.reg.Gather()
	must(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// awaitSynced waits until each key has had a successful sync.
func (r *rig) awaitSynced(t *testing.T, keys ...string) {
	t.Helper()
	testwait.For(t, fmt.Sprintf("imports %v synced", keys), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, k := range keys {
			if r.syncOK[k] == 0 {
				return false
			}
		}
		return true
	})
}

func createNamespace(t testing.TB, c *kubetest.Cluster, name string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func serviceImport(t *testing.T, c *kubetest.Cluster, ns, name string) (*mcsv1beta1.ServiceImport, bool) {
	t.Helper()
	si, err := c.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	must(t, err)
	return si, true
}

// importSlices returns the MCS EndpointSlices of a service, by name.
func importSlices(t *testing.T, c *kubetest.Cluster, ns, svc string) map[string]discoveryv1.EndpointSlice {
	t.Helper()
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(t.Context(), metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName + "=" + svc})
	must(t, err)
	out := map[string]discoveryv1.EndpointSlice{}
	for _, s := range list.Items {
		out[s.Name] = s
	}
	return out
}

func endpointsOf(slices map[string]discoveryv1.EndpointSlice) int {
	n := 0
	for _, s := range slices {
		n += len(s.Endpoints)
	}
	return n
}

var grpcEndpointPort = []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}}

func podEndpoints(n int, format string) []*federationpb.Endpoint {
	out := make([]*federationpb.Endpoint, n)
	for i := range out {
		out[i] = &federationpb.Endpoint{
			Address: fmt.Sprintf(format, i/250, i%250), Ports: grpcEndpointPort, Ready: true, Serving: true,
			Locality: &federationpb.Locality{Zone: "us-west1-a"},
		}
	}
	return out
}

// echoImport is a dual-stack ClusterSetIP import with every field set,
// endpoints of west (more than one slice's worth) and north's gateway.
func echoImport(ns string) *federationpb.Import {
	eps := podEndpoints(1200, "10.1.%d.%d")
	eps = append(eps, &federationpb.Endpoint{Address: "fd00::1", Ports: grpcEndpointPort, Ready: true, Serving: true})
	return &federationpb.Import{
		Namespace: ns, Name: "echo", Type: federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP, Mcs: true,
		Ports: []*federationpb.ServicePort{
			{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, AppProtocol: "grpc", Port: 8080},
			{Name: "dns", Protocol: federationpb.Protocol_PROTOCOL_UDP, Port: 53},
		},
		Ips:                           []string{"10.96.200.5", "fd00:96::5"},
		IpFamilies:                    []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4, federationpb.IPFamily_IP_FAMILY_IPV6},
		SessionAffinity:               federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP,
		SessionAffinityTimeoutSeconds: 600,
		InternalTrafficPolicy:         "Cluster",
		TrafficDistribution:           "PreferClose",
		Labels:                        []*federationpb.KeyValue{{Key: "tier", Value: "web"}},
		Annotations:                   []*federationpb.KeyValue{{Key: "example.com/owner", Value: "payments"}},
		Clusters:                      []string{"north", "west"},
		Ready:                         []string{"west"},
		Sources: []*federationpb.ImportSource{
			{Cluster: "west", Endpoints: eps},
			{Cluster: "north", ViaGateway: true, Endpoints: []*federationpb.Endpoint{
				{Address: "gw.north.example.com", Ports: []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 15443}}, Ready: true, Serving: true},
			}},
		},
	}
}

// dbImport is a headless import of a StatefulSet in west.
func dbImport(ns string) *federationpb.Import {
	return &federationpb.Import{
		Namespace: ns, Name: "db", Type: federationpb.ImportType_IMPORT_TYPE_HEADLESS, Mcs: true,
		Ports:    []*federationpb.ServicePort{{Name: "pg", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 5432}},
		Clusters: []string{"west"},
		Sources: []*federationpb.ImportSource{{Cluster: "west", Endpoints: []*federationpb.Endpoint{
			{Address: "10.1.9.1", Hostname: "db-0", Ports: []*federationpb.EndpointPort{{Name: "pg", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 5432}}, Ready: true, Serving: true},
			{Address: "10.1.9.2", Hostname: "db-1", Ports: []*federationpb.EndpointPort{{Name: "pg", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 5432}}, Serving: true, Terminating: true},
		}}},
	}
}

func checkHeld(t *testing.T, store *imports.Store, key string, want *federationpb.HeldImport) {
	t.Helper()
	testwait.For(t, "held "+key, func() bool {
		got, ok := store.Held().Get(key)
		if want == nil {
			return !ok
		}
		return ok && cmp.Diff(want, got, protocmp.Transform()) == ""
	})
}

func TestImportsWritten(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	createNamespace(t, c, "demo")
	r := runImports(t, c, nil)
	// A spoke that serves its mesh is sent every federated service; only
	// the MCS imports become ServiceImports.
	meshOnly := echoImport("demo")
	meshOnly.Name, meshOnly.Mcs = "mesh-only", false
	r.send(echoImport("demo"), dbImport("demo"), echoImport("later"), meshOnly)

	// The ClusterSetIP import, every field copied.
	testwait.For(t, "demo/echo imported with its status", func() bool {
		si, ok := serviceImport(t, c, "demo", "echo")
		return ok && len(si.Status.Clusters) == 2
	})
	si, _ := serviceImport(t, c, "demo", "echo")
	wantSpec := mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP,
		Ports: []mcsv1beta1.ServicePort{
			{Name: "grpc", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc"), Port: 8080},
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		},
		IPs:                   []string{"10.96.200.5", "fd00:96::5"},
		IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}},
		InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
		TrafficDistribution:   ptr.To("PreferClose"),
	}
	if diff := cmp.Diff(wantSpec, si.Spec); diff != "" {
		t.Errorf("demo/echo spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"tier": "web", importwriter.LabelManagedBy: importwriter.ManagedBy}, si.Labels); diff != "" {
		t.Errorf("demo/echo labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"example.com/owner": "payments", importwriter.AnnotationImportedKeys: "labels=tier;annotations=example.com/owner"}, si.Annotations); diff != "" {
		t.Errorf("demo/echo annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]mcsv1beta1.ClusterStatus{{Cluster: "north"}, {Cluster: "west"}}, si.Status.Clusters); diff != "" {
		t.Errorf("demo/echo status.clusters (-want +got):\n%s", diff)
	}
	if ready := meta.FindStatusCondition(si.Status.Conditions, "Ready"); ready == nil || ready.Status != metav1.ConditionTrue ||
		ready.Reason != "Ready" || ready.ObservedGeneration != si.Generation || ready.LastTransitionTime.IsZero() {
		t.Errorf("demo/echo Ready condition %+v, want True for generation %d", ready, si.Generation)
	}
	// CoreDNS reads v1alpha1: the same object, served at both versions.
	alpha, err := c.MCS.MulticlusterV1alpha1().ServiceImports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
	must(t, err)
	if !slices.Equal(alpha.Spec.IPs, wantSpec.IPs) {
		t.Errorf("v1alpha1 view of demo/echo: ips %v", alpha.Spec.IPs)
	}

	// Its slices: per cluster and family, at most 1000 endpoints each.
	testwait.For(t, "demo/echo's slices", func() bool { return endpointsOf(importSlices(t, c, "demo", "echo")) == 1202 })
	type shape struct {
		cluster string
		family  discoveryv1.AddressType
		n       int
	}
	got := map[shape]int{}
	for name, s := range importSlices(t, c, "demo", "echo") {
		got[shape{s.Labels[mcsv1beta1.LabelSourceCluster], s.AddressType, len(s.Endpoints)}]++
		if _, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
			t.Errorf("slice %s is labelled %s", name, discoveryv1.LabelServiceName)
		}
		if s.Labels[discoveryv1.LabelManagedBy] != importwriter.SliceManagedBy {
			t.Errorf("slice %s managed-by %q", name, s.Labels[discoveryv1.LabelManagedBy])
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != si.UID || s.OwnerReferences[0].Kind != "ServiceImport" {
			t.Errorf("slice %s owners %v, want the ServiceImport", name, s.OwnerReferences)
		}
		if s.AddressType == discoveryv1.AddressTypeFQDN && (s.Endpoints[0].Addresses[0] != "gw.north.example.com" || *s.Ports[0].Port != 15443) {
			t.Errorf("gateway slice %s: %+v", name, s)
		}
		if s.AddressType == discoveryv1.AddressTypeIPv4 && ptr.Deref(s.Endpoints[0].Zone, "") != "us-west1-a" {
			t.Errorf("slice %s: zone %v", name, s.Endpoints[0].Zone)
		}
	}
	wantShapes := map[shape]int{
		{"west", discoveryv1.AddressTypeIPv4, 1000}: 1, {"west", discoveryv1.AddressTypeIPv4, 200}: 1,
		{"west", discoveryv1.AddressTypeIPv6, 1}: 1, {"north", discoveryv1.AddressTypeFQDN, 1}: 1,
	}
	if diff := cmp.Diff(wantShapes, got); diff != "" {
		t.Errorf("demo/echo slices by cluster, family and size (-want +got):\n%s", diff)
	}

	// The source does not read meshfed's slices as the cluster's endpoints.
	r.mu.Lock()
	if got := r.in.EndpointSlices("demo", "echo"); len(got) != 0 || len(r.sliceChanges) != 0 {
		t.Errorf("the source reads meshfed's MCS slices as local ones: %d slices, changes %v", len(got), r.sliceChanges)
	}
	r.mu.Unlock()

	// The headless import: no IPs, hostnames and conditions on its endpoints.
	testwait.For(t, "demo/db's slice", func() bool { return endpointsOf(importSlices(t, c, "demo", "db")) == 2 })
	db, _ := serviceImport(t, c, "demo", "db")
	if db.Spec.Type != mcsv1beta1.Headless || len(db.Spec.IPs) != 0 {
		t.Errorf("demo/db spec %+v", db.Spec)
	}
	for _, s := range importSlices(t, c, "demo", "db") {
		want := []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.9.1"}, Hostname: ptr.To("db-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}},
			{Addresses: []string{"10.1.9.2"}, Hostname: ptr.To("db-1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}},
		}
		if diff := cmp.Diff(want, s.Endpoints); diff != "" {
			t.Errorf("demo/db endpoints (-want +got):\n%s", diff)
		}
	}

	// What the cluster holds, and an import whose namespace it lacks.
	checkHeld(t, r.store, "demo/echo", &federationpb.HeldImport{Namespace: "demo", Name: "echo", Ips: wantSpec.IPs, Clusters: []string{"north", "west"}})
	checkHeld(t, r.store, "demo/db", &federationpb.HeldImport{Namespace: "demo", Name: "db", Clusters: []string{"west"}})
	checkHeld(t, r.store, "later/echo", &federationpb.HeldImport{Namespace: "later", Name: "echo", NoNamespace: true})
	r.awaitSynced(t, "demo/mesh-only")
	if _, ok := serviceImport(t, c, "demo", "mesh-only"); ok || len(importSlices(t, c, "demo", "mesh-only")) != 0 {
		t.Error("a service that is no MCS import was written")
	}
	if h, ok := r.store.Held().Get("demo/mesh-only"); ok {
		t.Errorf("a service that is no MCS import is reported held: %v", h)
	}

	// The namespace normalizetest.Created later gets its import.
	createNamespace(t, c, "later")
	testwait.For(t, "later/echo imported", func() bool { return endpointsOf(importSlices(t, c, "later", "echo")) == 1202 })
	checkHeld(t, r.store, "later/echo", &federationpb.HeldImport{Namespace: "later", Name: "echo", Ips: wantSpec.IPs, Clusters: []string{"north", "west"}})

	// An import that changes: fewer endpoints, another cluster's status.
	smaller := echoImport("demo")
	smaller.Sources[0].Endpoints = smaller.Sources[0].Endpoints[:10]
	smaller.Clusters = []string{"west"}
	smaller.Sources = smaller.Sources[:1]
	// and the hub's IPv6 clusterset CIDR exhausted: the import is not Ready.
	smaller.Ips = smaller.Ips[:1]
	smaller.IpError = "clusterset CIDR fd00:96::/120 is exhausted"
	r.send(smaller, dbImport("demo"), echoImport("later"))
	testwait.For(t, "demo/echo shrunk", func() bool {
		si, _ := serviceImport(t, c, "demo", "echo")
		return len(importSlices(t, c, "demo", "echo")) == 1 && len(si.Status.Clusters) == 1
	})
	testwait.For(t, "demo/echo not Ready", func() bool {
		si, _ := serviceImport(t, c, "demo", "echo")
		ready := meta.FindStatusCondition(si.Status.Conditions, "Ready")
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == importwriter.ReasonClusterSetIPExhausted &&
			ready.Message == smaller.IpError && ready.ObservedGeneration == si.Generation
	})

	// An import that leaves the set goes, with its slices.
	r.send(dbImport("demo"), echoImport("later"))
	testwait.For(t, "demo/echo removed", func() bool {
		_, ok := serviceImport(t, c, "demo", "echo")
		return !ok && len(importSlices(t, c, "demo", "echo")) == 0
	})
	checkHeld(t, r.store, "demo/echo", nil)
	if _, ok := serviceImport(t, c, "demo", "db"); !ok {
		t.Error("demo/db removed with demo/echo")
	}
	// Its own objects, not yet in its informer's cache, are never taken
	// for another's.
	if strings.Contains(r.logs.String(), "an object meshfed does not own") {
		t.Error("the writer took its own object for another's")
	}
}

// A user's ServiceImport and EndpointSlice of the names meshfed would
// write are left alone, reported, and taken once they go.
func TestImportsLeaveUsersObjects(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	ctx := t.Context()
	createNamespace(t, c, "demo")
	user := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", Labels: map[string]string{"owner": "me"}},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{{Port: 1}}},
	}
	user, err := c.MCS.MulticlusterV1beta1().ServiceImports("demo").Create(ctx, user, metav1.CreateOptions{})
	must(t, err)
	r := runImports(t, c, nil)
	r.send(echoImport("demo"), dbImport("demo"))
	testwait.For(t, "demo/db imported", func() bool { return endpointsOf(importSlices(t, c, "demo", "db")) == 2 })
	testwait.For(t, "the conflict counted", func() bool { return r.gauge(t, "meshfed_spoke_import_conflicts") == 1 })
	got, _ := serviceImport(t, c, "demo", "echo")
	if got.ResourceVersion != user.ResourceVersion {
		t.Errorf("the user's ServiceImport was written: %+v", got)
	}
	if n := len(importSlices(t, c, "demo", "echo")); n != 0 {
		t.Errorf("%d slices for the user's ServiceImport", n)
	}
	checkHeld(t, r.store, "demo/echo", nil)
	if n := strings.Count(r.logs.String(), "an object meshfed does not own"); n != 1 || strings.Contains(r.logs.String(), "meshfed's again\" component=imports import=demo/db") {
		t.Errorf("the conflict logged %d times, want once", n)
	}

	// Once the user's object goes, meshfed writes its own.
	must(t, c.MCS.MulticlusterV1beta1().ServiceImports("demo").Delete(ctx, "echo", metav1.DeleteOptions{}))
	testwait.For(t, "demo/echo imported", func() bool { return endpointsOf(importSlices(t, c, "demo", "echo")) == 1202 })
	testwait.For(t, "the conflict cleared", func() bool { return r.gauge(t, "meshfed_spoke_import_conflicts") == 0 })

	// A user's slice that is not marked as meshfed's is never deleted.
	stray := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo-stray", Labels: map[string]string{
			mcsv1beta1.LabelServiceName: "echo", mcsv1beta1.LabelSourceCluster: "west",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	_, err = c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, stray, metav1.CreateOptions{})
	must(t, err)
	r.send(dbImport("demo"))
	testwait.For(t, "demo/echo removed", func() bool { _, ok := serviceImport(t, c, "demo", "echo"); return !ok })
	testwait.For(t, "meshfed's slices of demo/echo removed", func() bool { return len(importSlices(t, c, "demo", "echo")) == 1 })
	if _, ok := importSlices(t, c, "demo", "echo")["echo-stray"]; !ok {
		t.Error("the user's slice was deleted")
	}
}

// A restarted writer over the same cluster and set writes nothing; one
// whose set shrank while it was down removes what the set lost.
func TestImportsRestart(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	createNamespace(t, c, "demo")
	set := []*federationpb.Import{echoImport("demo"), dbImport("demo")}
	r := runImports(t, c, nil)
	r.send(set...)
	testwait.For(t, "imports written", func() bool {
		return endpointsOf(importSlices(t, c, "demo", "echo")) == 1202 && endpointsOf(importSlices(t, c, "demo", "db")) == 2
	})
	r.awaitSynced(t, "demo/echo", "demo/db")
	testwait.For(t, "demo/echo's status", func() bool { si, _ := serviceImport(t, c, "demo", "echo"); return len(si.Status.Clusters) == 2 })
	r.stop()

	// Labels another controller adds stay, and are no reason to write.
	si, _ := serviceImport(t, c, "demo", "echo")
	si.Labels["example.com/cost-center"] = "42"
	_, err := c.MCS.MulticlusterV1beta1().ServiceImports("demo").Update(t.Context(), si, metav1.UpdateOptions{})
	must(t, err)
	for _, s := range importSlices(t, c, "demo", "db") {
		s.Labels["example.com/cost-center"] = "42"
		_, err := c.Client.DiscoveryV1().EndpointSlices("demo").Update(t.Context(), &s, metav1.UpdateOptions{})
		must(t, err)
	}

	again := runImports(t, c, nil)
	again.send(set...)
	again.awaitSynced(t, "demo/echo", "demo/db")
	checkHeld(t, again.store, "demo/echo", &federationpb.HeldImport{Namespace: "demo", Name: "echo", Ips: []string{"10.96.200.5", "fd00:96::5"}, Clusters: []string{"north", "west"}})
	if n := again.writes(t); n != 0 {
		t.Errorf("the restarted writer sent %v writes, want none", n)
	}
	again.stop()
	if si, _ := serviceImport(t, c, "demo", "echo"); si.Labels["example.com/cost-center"] != "42" {
		t.Errorf("another's label removed: %v", si.Labels)
	}

	// The hub holds the last set until the spoke is back: its store has
	// nothing before the link's first set, and the writer waits for it.
	shrunk := runImports(t, c, nil)
	checkHeld(t, shrunk.store, "demo/db", &federationpb.HeldImport{Namespace: "demo", Name: "db", Clusters: []string{"west"}})
	if n := shrunk.writes(t); n != 0 {
		t.Errorf("%v writes before a set", n)
	}
	shrunk.send(dbImport("demo"))
	testwait.For(t, "demo/echo removed after the restart", func() bool {
		_, ok := serviceImport(t, c, "demo", "echo")
		return !ok && len(importSlices(t, c, "demo", "echo")) == 0
	})
	if _, ok := serviceImport(t, c, "demo", "db"); !ok {
		t.Error("demo/db removed")
	}
}

// crds returns the MCS CRDs, changed by edit.
func crds(t *testing.T, edit func(*apiextensionsv1.CustomResourceDefinition)) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	out, err := kubetest.CRDs()
	must(t, err)
	for _, crd := range out {
		if edit != nil {
			edit(crd)
		}
	}
	return out
}

// v1alpha1Only makes a CRD serve and store v1alpha1 alone, as clusters
// with the older mcs-api CRDs do.
func v1alpha1Only(crd *apiextensionsv1.CustomResourceDefinition) {
	crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name != "v1alpha1" })
	crd.Spec.Versions[0].Storage = true
}

func crdClient(t *testing.T, c *kubetest.Cluster) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	must(t, apiextensionsv1.AddToScheme(scheme))
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	must(t, err)
	return cl
}

// deleteCRDs removes the MCS CRDs and waits until they are gone.
func deleteCRDs(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	cl := crdClient(t, c)
	for _, crd := range crds(t, nil) {
		if err := cl.Delete(t.Context(), crd); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		testwait.For(t, "CRD "+crd.Name+" deleted", func() bool {
			err := cl.Get(t.Context(), client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{})
			return apierrors.IsNotFound(err)
		})
	}
}

// installCRDs creates CRDs and waits until they are established.
func installCRDs(t *testing.T, c *kubetest.Cluster, list []*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	cl := crdClient(t, c)
	for _, crd := range list {
		must(t, cl.Create(t.Context(), crd))
		testwait.For(t, "CRD "+crd.Name+" established", func() bool {
			got := &apiextensionsv1.CustomResourceDefinition{}
			must(t, cl.Get(t.Context(), client.ObjectKeyFromObject(crd), got))
			return slices.ContainsFunc(got.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
				return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			})
		})
	}
}

// The CRDs installed after the source started: it watches the exports and
// writes the imports without a restart. Installed as v1alpha1 only, the
// older CRDs: everything works at that version.
func TestImportsCRDsInstalledLaterV1alpha1Only(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	ctx := t.Context()
	deleteCRDs(t, c)
	createNamespace(t, c, "demo")
	_, err := c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}},
	}, metav1.CreateOptions{})
	must(t, err)
	r := runImports(t, c, nil)
	r.send(echoImport("demo"))
	testwait.For(t, "the source waiting for the CRDs", func() bool { return strings.Contains(r.logs.String(), "serves no MCS ServiceImports") })

	installCRDs(t, c, crds(t, v1alpha1Only))
	_, err = c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Create(ctx,
		&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}}, metav1.CreateOptions{})
	must(t, err)
	testwait.For(t, "demo/echo imported at v1alpha1", func() bool {
		si, err := c.MCS.MulticlusterV1alpha1().ServiceImports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
		return err == nil && len(si.Status.Clusters) == 2 && endpointsOf(importSlices(t, c, "demo", "echo")) == 1202
	})
	for name, s := range importSlices(t, c, "demo", "echo") {
		if s.OwnerReferences[0].APIVersion != mcsv1alpha1.GroupVersion.String() {
			t.Errorf("slice %s owner %v, want the served version", name, s.OwnerReferences[0])
		}
	}
	// The ServiceExport informer started too: its status is written.
	testwait.For(t, "demo/echo's export Valid and Ready", func() bool {
		se, err := c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
		must(t, err)
		var types []string
		for _, c := range se.Status.Conditions {
			types = append(types, c.Type)
		}
		slices.Sort(types)
		return slices.Equal(types, []string{"Conflict", "Ready", "Valid"})
	})
	if n := r.writes(t); n == 0 {
		t.Error("no writes counted")
	}
}

// The Conflict and Ready conditions of this cluster's ServiceExports
// follow the import; other controllers' conditions stay.
func TestExportConditionsFromImports(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	ctx := t.Context()
	createNamespace(t, c, "demo")
	_, err := c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}},
	}, metav1.CreateOptions{})
	must(t, err)
	se, err := c.MCS.MulticlusterV1beta1().ServiceExports("demo").Create(ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}}, metav1.CreateOptions{})
	must(t, err)
	se.Status.Conditions = []metav1.Condition{{Type: "example.com/Audited", Status: metav1.ConditionTrue, Reason: "Audited", LastTransitionTime: metav1.Now()}}
	_, err = c.MCS.MulticlusterV1beta1().ServiceExports("demo").UpdateStatus(ctx, se, metav1.UpdateOptions{})
	must(t, err)

	r := runImports(t, c, nil)
	conditions := func() map[string]metav1.Condition {
		se, err := c.MCS.MulticlusterV1beta1().ServiceExports("demo").Get(ctx, "echo", metav1.GetOptions{})
		must(t, err)
		out := map[string]metav1.Condition{}
		for _, c := range se.Status.Conditions {
			c.LastTransitionTime = metav1.Time{}
			out[c.Type] = c
		}
		return out
	}
	awaitConditions := func(what string, want map[string]metav1.Condition) {
		t.Helper()
		var diff string
		testwait.For(t, what, func() bool {
			diff = cmp.Diff(want, conditions(), cmpopts.IgnoreFields(metav1.Condition{}, "Message", "ObservedGeneration"))
			return diff == ""
		})
	}
	audited := metav1.Condition{Type: "example.com/Audited", Status: metav1.ConditionTrue, Reason: "Audited"}
	valid := metav1.Condition{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Valid"}
	// No set yet: Valid alone.
	awaitConditions("Valid", map[string]metav1.Condition{"Valid": valid, "example.com/Audited": audited})

	// A set without the import: Pending.
	r.send(dbImport("demo"))
	awaitConditions("Ready Pending", map[string]metav1.Condition{
		"Valid": valid, "example.com/Audited": audited,
		"Ready": {Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending"},
	})

	// Conflicts: the first's reason, every message.
	im := echoImport("demo")
	im.Ready = nil
	im.Conflicts = []*federationpb.ImportConflict{
		{Reason: "PortConflict", Message: "east and west export port grpc differently"},
		{Reason: "SessionAffinityConflict", Message: "west has ClientIP"},
	}
	r.send(im, dbImport("demo"))
	awaitConditions("Conflict", map[string]metav1.Condition{
		"Valid": valid, "example.com/Audited": audited,
		"Ready":    {Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending"},
		"Conflict": {Type: "Conflict", Status: metav1.ConditionTrue, Reason: "PortConflict"},
	})
	if msg := conditions()["Conflict"].Message; msg != "east and west export port grpc differently; west has ClientIP" {
		t.Errorf("Conflict message %q", msg)
	}

	// Resolved, and every cluster imports this one's export: Ready.
	im = echoImport("demo")
	im.Ready = []string{"east", "west"}
	r.send(im, dbImport("demo"))
	awaitConditions("Ready", map[string]metav1.Condition{
		"Valid": valid, "example.com/Audited": audited,
		"Ready":    {Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"},
		"Conflict": {Type: "Conflict", Status: metav1.ConditionFalse, Reason: "NoConflicts"},
	})
}

// CoreDNS (its kubernetes plugin's multicluster option, which reads
// ServiceImports as v1alpha1) answers the clusterset.local names of what
// the writer wrote: a ClusterSetIP import's IPs, a headless import's ready
// endpoints, and <hostname>.<cluster>.<service> from a slice's hostname
// and source-cluster label.
func TestImportsResolveInCoreDNS(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	createNamespace(t, c, "demo")
	s := dnstest.Start(t, c)
	r := runImports(t, c, nil)
	r.send(echoImport("demo"), dbImport("demo"))

	echo := "echo.demo.svc." + dnstest.ClusterSetZone
	s.WaitFor(t, echo, dns.TypeA, dnstest.Answer{Rcode: "NOERROR", Records: []string{"10.96.200.5"}})
	s.WaitFor(t, echo, dns.TypeAAAA, dnstest.Answer{Rcode: "NOERROR", Records: []string{"fd00:96::5"}})
	s.WaitFor(t, "_grpc._tcp."+echo, dns.TypeSRV, dnstest.Answer{Rcode: "NOERROR", Records: []string{"0 50 8080 " + echo + "."}})

	db := "db.demo.svc." + dnstest.ClusterSetZone
	s.WaitFor(t, db, dns.TypeA, dnstest.Answer{Rcode: "NOERROR", Records: []string{"10.1.9.1"}}) // db-1 is terminating
	s.WaitFor(t, "db-0.west."+db, dns.TypeA, dnstest.Answer{Rcode: "NOERROR", Records: []string{"10.1.9.1"}})
	s.WaitFor(t, "db-1.west."+db, dns.TypeA, dnstest.Answer{Rcode: "NXDOMAIN"})

	// The import goes: so do its names.
	r.send(echoImport("demo"))
	s.WaitFor(t, db, dns.TypeA, dnstest.Answer{Rcode: "NXDOMAIN"})
}
