package importwriter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
)

func TestDesiredImportCopiesEveryField(t *testing.T) {
	im := &federationpb.Import{
		Namespace: "demo", Name: "echo", Type: federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP,
		Ports: []*federationpb.ServicePort{
			{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, AppProtocol: "grpc", Port: 8080, TargetPort: 9090},
			{Name: "dns", Protocol: federationpb.Protocol_PROTOCOL_UDP, Port: 53},
			{Name: "plain", Port: 80},
		},
		Ips:                           []string{"fd00::5", "10.96.200.5"},
		IpFamilies:                    []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV6, federationpb.IPFamily_IP_FAMILY_IPV4},
		SessionAffinity:               federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP,
		SessionAffinityTimeoutSeconds: 600,
		InternalTrafficPolicy:         "Local",
		TrafficDistribution:           "PreferClose",
		Labels:                        []*federationpb.KeyValue{{Key: "tier", Value: "web"}, {Key: LabelManagedBy, Value: "Helm"}},
		Annotations:                   []*federationpb.KeyValue{{Key: "example.com/owner", Value: "payments"}},
		Clusters:                      []string{"west", "east"},
	}
	got := desiredImport(im)
	want := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "demo", Name: "echo",
			// The ownership label wins over an exported one of its key.
			Labels: map[string]string{"tier": "web", LabelManagedBy: ManagedBy},
			Annotations: map[string]string{
				"example.com/owner":    "payments",
				AnnotationImportedKeys: "labels=" + LabelManagedBy + ",tier;annotations=example.com/owner",
			},
		},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP,
			Ports: []mcsv1beta1.ServicePort{
				{Name: "grpc", Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc"), Port: 8080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
				{Name: "plain", Protocol: corev1.ProtocolTCP, Port: 80},
			},
			IPs:                   []string{"fd00::5", "10.96.200.5"},
			IPFamilies:            []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}},
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:   ptr.To("PreferClose"),
		},
		Status: mcsv1beta1.ServiceImportStatus{
			Clusters: []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}},
			Conditions: []metav1.Condition{{
				Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready", Message: "the import has a ClusterSetIP of every IP family it needs",
			}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("desiredImport (-want +got):\n%s", diff)
	}
	if importChanged(got, want) || statusChanged(got, want, true) {
		t.Error("an import compares unequal to itself")
	}
	other := want.DeepCopy()
	other.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptr.To[int32](60)
	if !importChanged(other, want) {
		t.Error("a changed timeout compares equal")
	}
}

// Labels and annotations others add to meshfed's ServiceImport stay
// (fighting an admission webhook that adds them would be a write loop);
// those the import drops go.
func TestImportMetadataKeepsOthers(t *testing.T) {
	im := &federationpb.Import{
		Namespace: "demo", Name: "echo",
		Labels:      []*federationpb.KeyValue{{Key: "tier", Value: "web"}, {Key: "team", Value: "a"}},
		Annotations: []*federationpb.KeyValue{{Key: "note", Value: "x"}},
	}
	stored := desiredImport(im)
	stored.Labels["example.com/cost-center"] = "42" // a webhook's
	stored.Annotations["example.com/audit"] = "ok"
	if importChanged(stored, desiredImport(im)) {
		t.Error("another's label or annotation makes the import differ: the writer would fight it")
	}

	im.Labels = im.Labels[:1] // the export drops team
	im.Annotations = nil
	want := desiredImport(im)
	if !importChanged(stored, want) {
		t.Fatal("a dropped label does not make the import differ")
	}
	labels, annotations := importMeta(stored, want)
	if diff := cmp.Diff(map[string]string{"tier": "web", "example.com/cost-center": "42", LabelManagedBy: ManagedBy}, labels); diff != "" {
		t.Errorf("labels written (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"example.com/audit": "ok", AnnotationImportedKeys: "labels=tier;annotations="}, annotations); diff != "" {
		t.Errorf("annotations written (-want +got):\n%s", diff)
	}
}

func TestDesiredImportHeadless(t *testing.T) {
	got := desiredImport(&federationpb.Import{Namespace: "demo", Name: "db", Type: federationpb.ImportType_IMPORT_TYPE_HEADLESS})
	if got.Spec.Type != mcsv1beta1.Headless || got.Spec.IPs != nil || got.Spec.Ports == nil ||
		got.Spec.SessionAffinity != corev1.ServiceAffinityNone || got.Spec.SessionAffinityConfig != nil {
		t.Errorf("headless import: %+v", got.Spec)
	}
}

func endpoints(n int, format string, ports ...*federationpb.EndpointPort) []*federationpb.Endpoint {
	out := make([]*federationpb.Endpoint, n)
	for i := range out {
		out[i] = &federationpb.Endpoint{Address: fmt.Sprintf(format, i/250, i%250), Ports: ports, Ready: true, Serving: true}
	}
	return out
}

func TestDesiredSlices(t *testing.T) {
	grpc := &federationpb.EndpointPort{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}
	metrics := &federationpb.EndpointPort{Name: "metrics", Port: 9090}
	eps := endpoints(2500, "10.1.%d.%d", grpc)
	eps = append(eps, endpoints(3, "fd00::%d:%d", grpc)...)
	eps = append(eps, &federationpb.Endpoint{
		Address: "10.2.0.1", Ports: []*federationpb.EndpointPort{grpc, metrics},
		Hostname: "web-0", Locality: &federationpb.Locality{Region: "r", Zone: "z1"}, Terminating: true, Serving: true,
	})
	im := &federationpb.Import{
		Namespace: "demo", Name: "echo",
		Sources: []*federationpb.ImportSource{
			{Cluster: "west", Endpoints: eps},
			{Cluster: "north", ViaGateway: true, Endpoints: []*federationpb.Endpoint{
				{Address: "gw.north.example.com", Ports: []*federationpb.EndpointPort{{Name: "grpc", Port: 15443}}, Ready: true},
				{Address: "gw.north.example.com", Ports: []*federationpb.EndpointPort{{Name: "grpc", Port: 15443}}, Ready: true},
			}},
		},
	}
	owner := ownerRef("multicluster.x-k8s.io/v1beta1", "echo", "uid-1")
	got := desiredSlices(im, owner)

	type summary struct {
		cluster   string
		family    discoveryv1.AddressType
		endpoints int
		ports     int
	}
	var sums []summary
	total := 0
	for name, s := range got {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("slice name %q: %v", name, errs)
		}
		if s.Name != name || s.Namespace != "demo" {
			t.Errorf("slice %s: named %s/%s", name, s.Namespace, s.Name)
		}
		if _, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
			t.Errorf("slice %s has %s: kube-proxy would route the local Service to it", name, discoveryv1.LabelServiceName)
		}
		if s.Labels[mcsv1beta1.LabelServiceName] != "echo" || s.Labels[discoveryv1.LabelManagedBy] != SliceManagedBy ||
			s.Labels[mcsv1beta1.LabelSourceCluster] == "" {
			t.Errorf("slice %s labels %v", name, s.Labels)
		}
		if !strings.HasPrefix(name, "echo-"+s.Labels[mcsv1beta1.LabelSourceCluster]+"-"+strings.ToLower(string(s.AddressType))+"-") {
			t.Errorf("slice name %s does not read as its service, cluster and family", name)
		}
		if len(s.Endpoints) > MaxEndpointsPerSlice {
			t.Errorf("slice %s has %d endpoints", name, len(s.Endpoints))
		}
		if diff := cmp.Diff([]metav1.OwnerReference{owner}, s.OwnerReferences); diff != "" {
			t.Errorf("slice %s owners (-want +got):\n%s", name, diff)
		}
		total += len(s.Endpoints)
		sums = append(sums, summary{s.Labels[mcsv1beta1.LabelSourceCluster], s.AddressType, len(s.Endpoints), len(s.Ports)})
	}
	if total != 2500+3+1+1 {
		t.Errorf("%d endpoints in the slices, want 2505 (a gateway's address once)", total)
	}
	wantSums := map[summary]int{
		{"west", discoveryv1.AddressTypeIPv4, 1000, 1}: 2,
		{"west", discoveryv1.AddressTypeIPv4, 500, 1}:  1,
		{"west", discoveryv1.AddressTypeIPv4, 1, 2}:    1,
		{"west", discoveryv1.AddressTypeIPv6, 3, 1}:    1,
		{"north", discoveryv1.AddressTypeFQDN, 1, 1}:   1,
	}
	gotSums := map[summary]int{}
	for _, s := range sums {
		gotSums[s]++
	}
	if diff := cmp.Diff(wantSums, gotSums); diff != "" {
		t.Errorf("slices by cluster, family, endpoints and ports (-want +got):\n%s", diff)
	}
	for _, s := range got {
		if s.AddressType == discoveryv1.AddressTypeIPv4 && len(s.Ports) == 2 {
			want := discoveryv1.Endpoint{
				Addresses:  []string{"10.2.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)},
				Hostname:   ptr.To("web-0"), Zone: ptr.To("z1"),
			}
			if diff := cmp.Diff([]discoveryv1.Endpoint{want}, s.Endpoints); diff != "" {
				t.Errorf("endpoint (-want +got):\n%s", diff)
			}
		}
	}

	// The same import gives the same slices: a restart finds them.
	again := desiredSlices(im, owner)
	for name, s := range got {
		if a, ok := again[name]; !ok || sliceChanged(a, s) {
			t.Errorf("slice %s differs when computed again", name)
		}
	}
}

func TestSliceNamesDistinct(t *testing.T) {
	a := sliceName("a-b", "c", discoveryv1.AddressTypeIPv4, "", 0)
	b := sliceName("a", "b-c", discoveryv1.AddressTypeIPv4, "", 0)
	if a == b {
		t.Errorf("service a-b of c and service a of b-c share slice name %s", a)
	}
}

// The Ready condition says why an import lacks a ClusterSetIP, in the
// reasons of the MCS API where it has one.
func TestReadyCondition(t *testing.T) {
	for _, tc := range []struct {
		im             *federationpb.Import
		status, reason string
	}{
		{&federationpb.Import{Ips: []string{"240.242.0.1"}}, "True", "Ready"},
		{&federationpb.Import{Type: federationpb.ImportType_IMPORT_TYPE_HEADLESS}, "True", "Ready"},
		{&federationpb.Import{IpError: "no clusterset CIDR of family IPv6"}, "False", "IPFamilyNotSupported"},
		{&federationpb.Import{IpError: "clusterset CIDR 240.242.0.0/16 is exhausted"}, "False", ReasonClusterSetIPExhausted},
	} {
		c := readyCondition(tc.im)
		if c.Type != "Ready" || string(c.Status) != tc.status || c.Reason != tc.reason || c.Message == "" {
			t.Errorf("%v: %+v, want %s %s", tc.im, c, tc.status, tc.reason)
		}
		if tc.im.GetIpError() != "" && c.Message != tc.im.GetIpError() {
			t.Errorf("%v: message %q, want the hub's", tc.im, c.Message)
		}
	}

	// Against an API server that prunes conditions, only the clusters count.
	want := desiredImport(&federationpb.Import{Namespace: "demo", Name: "echo", Clusters: []string{"west"}})
	pruned := want.DeepCopy()
	pruned.Status.Conditions = nil
	if !statusChanged(pruned, want, true) || statusChanged(pruned, want, false) {
		t.Error("a status without conditions: changed unless conditions are pruned")
	}
	stale := want.DeepCopy()
	stale.Generation = 2
	if !statusChanged(stale, want, true) {
		t.Error("a Ready condition of an older generation compares equal")
	}
}
