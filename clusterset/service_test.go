package clusterset

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/federationtest"
)

func export(cluster federation.ClusterID, age time.Duration, edit func(*federationpb.Service)) ClusterService {
	s := federationtest.Service()
	s.Export.Time = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age))
	if edit != nil {
		edit(s)
	}
	return ClusterService{Cluster: cluster, Network: federation.NetworkID("net-" + cluster), Service: s}
}

func TestMergeService(t *testing.T) {
	t.Run("namespace sameness", func(t *testing.T) {
		v := MergeService([]ClusterService{export("west", 0, nil), export("east", time.Hour, nil)})
		if v.Key != "demo/echo" || len(v.Clusters) != 2 || v.Clusters[0].Cluster != "east" || len(v.Conflicts) != 0 {
			t.Fatalf("merged %+v", v)
		}
		if v.ClustersetHostname != "echo.demo.svc.clusterset.local" {
			t.Errorf("clusterset hostname %q", v.ClustersetHostname)
		}
	})
	t.Run("oldest export wins the type", func(t *testing.T) {
		v := MergeService([]ClusterService{
			export("east", 0, func(s *federationpb.Service) { s.Type = federationpb.ServiceType_SERVICE_TYPE_HEADLESS }),
			export("west", time.Hour, nil),
		})
		if v.Type != federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP {
			t.Errorf("type %v, want west's (older) cluster IP", v.Type)
		}
		want := []Conflict{{Reason: ReasonTypeConflict, Clusters: []federation.ClusterID{"east"}, Message: v.Conflicts[0].Message}}
		if diff := cmp.Diff(want, v.Conflicts); diff != "" {
			t.Errorf("conflicts (-want +got):\n%s", diff)
		}
	})
	t.Run("ports are the union, clashes reported", func(t *testing.T) {
		v := MergeService([]ClusterService{
			export("east", time.Hour, nil),
			export("west", 0, func(s *federationpb.Service) {
				s.Ports = append(s.Ports, &federationpb.ServicePort{Name: "http", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 80})
				s.Ports[0].Port = 9090 // same name as east's grpc, other number
			}),
		})
		var got []uint32
		for _, p := range v.Ports {
			got = append(got, p.GetPort())
		}
		if diff := cmp.Diff([]uint32{80, 8080}, got); diff != "" {
			t.Errorf("ports (-want +got):\n%s", diff)
		}
		if len(v.Conflicts) != 1 || v.Conflicts[0].Reason != ReasonPortConflict || v.Conflicts[0].Clusters[0] != "west" {
			t.Errorf("conflicts %+v, want a port conflict of west", v.Conflicts)
		}
	})
	t.Run("ports sets that differ: the union, and a conflict (MCS conformance)", func(t *testing.T) {
		v := MergeService([]ClusterService{
			export("east", time.Hour, nil),
			export("west", 0, func(s *federationpb.Service) {
				s.Ports = append(s.Ports, &federationpb.ServicePort{Name: "stcp", Protocol: federationpb.Protocol_PROTOCOL_SCTP, Port: 142})
			}),
		})
		if len(v.Ports) != 2 {
			t.Errorf("ports %v, want the union of both exports'", v.Ports)
		}
		if len(v.Conflicts) != 1 || v.Conflicts[0].Reason != ReasonPortConflict || !slices.Equal(v.Conflicts[0].Clusters, []federation.ClusterID{"west"}) {
			t.Errorf("conflicts %+v, want a port conflict of west", v.Conflicts)
		}
	})
	t.Run("target ports are each cluster's own: no conflict", func(t *testing.T) {
		v := MergeService([]ClusterService{
			export("east", time.Hour, nil),
			export("west", 0, func(s *federationpb.Service) { s.Ports[0].TargetPort, s.Ports[0].TargetPortName = 0, "grpc-alt" }),
		})
		if len(v.Conflicts) != 0 {
			t.Errorf("conflicts %+v, want none", v.Conflicts)
		}
	})
	t.Run("label exports have no clusterset hostname", func(t *testing.T) {
		v := MergeService([]ClusterService{export("east", 0, func(s *federationpb.Service) {
			s.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_LABEL
		})})
		if v.ClustersetHostname != "" {
			t.Errorf("clusterset hostname %q, want none", v.ClustersetHostname)
		}
	})
	if MergeService(nil) != nil {
		t.Error("merging nothing gave a service")
	}
}

func TestTagEndpoints(t *testing.T) {
	a, b := federationtest.Endpoint(), federationtest.Endpoint()
	b.Address, b.Network = "10.0.0.0", "other"
	got := TagEndpoints(NewTags("east", "n1"), NewEndpoints(a, b))
	if got[0].GetAddress() != "10.0.0.0" || got[0].Network != "other" || got[1].Network != "n1" || got[1].Cluster != "east" {
		t.Errorf("tagged %+v", got)
	}
	// An endpoint interned with its cluster's tags has them: tagging it
	// again hands it back, and another cluster's tags make a copy.
	in, east := NewInterner(), NewTags("east", "n1")
	e := in.Endpoint(east, a, nil)
	if e.Cluster != "east" || e.Network != "n1" || TagEndpoint(east, e).Endpoint != e {
		t.Errorf("an interned endpoint is tagged %+v, or tagged again as a copy", e.Tag)
	}
	if w := in.Endpoint(NewTags("west", "n2"), a, nil); w.endpointGroup == e.endpointGroup || w.Cluster != "west" || e.Cluster != "east" {
		t.Errorf("two clusters' endpoints share a group, or a tag: %+v, %+v", e.Tag, w.Tag)
	}
	if moved := TagEndpoint(NewTags("east", "n9"), e); moved.Endpoint == e || moved.Network != "n9" || e.Network != "n1" {
		t.Errorf("a new network retagged %+v in place, or not at all: %+v", e.Tag, moved.Tag)
	}
}

// Every property MCS copies from the oldest export into the import is a
// conflict of its own when an export differs, named by its reason, and
// the oldest export's value is the import's.
func TestMergeServiceConflictPerProperty(t *testing.T) {
	kv := func(k, v string) []*federationpb.KeyValue { return []*federationpb.KeyValue{{Key: k, Value: v}} }
	for _, tc := range []struct {
		reason string
		edit   func(*federationpb.Service)
	}{
		{ReasonTypeConflict, func(s *federationpb.Service) { s.Type = federationpb.ServiceType_SERVICE_TYPE_HEADLESS }},
		{ReasonPortConflict, func(s *federationpb.Service) { s.Ports[0].Port = 9090 }},
		{ReasonPortConflict, func(s *federationpb.Service) { s.Ports[0].Protocol = federationpb.Protocol_PROTOCOL_UDP }},
		{ReasonPortConflict, func(s *federationpb.Service) { s.Ports[0].AppProtocol = "http2" }},
		{ReasonSessionAffinityConflict, func(s *federationpb.Service) {
			s.SessionAffinity = federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP
		}},
		{ReasonSessionAffinityConfigConflict, func(s *federationpb.Service) { s.SessionAffinityTimeoutSeconds = 60 }},
		{ReasonInternalTrafficPolicyConflict, func(s *federationpb.Service) { s.InternalTrafficPolicy = "Local" }},
		{ReasonTrafficDistributionConflict, func(s *federationpb.Service) { s.TrafficDistribution = "PreferClose" }},
		{ReasonIPFamilyConflict, func(s *federationpb.Service) {
			s.IpFamilies = []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV6}
		}},
		{ReasonLabelsConflict, func(s *federationpb.Service) { s.Export.Labels = kv("tier", "web") }},
		{ReasonAnnotationsConflict, func(s *federationpb.Service) { s.Export.Annotations = kv("owner", "team-a") }},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			// The differing export is the younger: the oldest (east) wins.
			v := MergeService([]ClusterService{export("west", 0, tc.edit), export("east", time.Hour, nil), export("north", 2*time.Hour, nil)})
			if len(v.Conflicts) != 1 || v.Conflicts[0].Reason != tc.reason || !slices.Equal(v.Conflicts[0].Clusters, []federation.ClusterID{"west"}) {
				t.Fatalf("conflicts %+v, want one %s of west", v.Conflicts, tc.reason)
			}
			if msg := v.Conflicts[0].Message; !strings.Contains(msg, "cluster west") || !strings.Contains(msg, "cluster north") {
				t.Errorf("message %q names neither the differing cluster nor the oldest export's", msg)
			}
			if v.OldestCluster != "north" || v.Oldest.GetSessionAffinity() != federationpb.SessionAffinity_SESSION_AFFINITY_NONE ||
				len(v.Oldest.GetExport().GetLabels()) != 0 || v.Type != federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP {
				t.Errorf("the import follows %s, not the oldest export", v.OldestCluster)
			}
			// The same export, now the oldest, wins instead.
			v = MergeService([]ClusterService{export("west", 3*time.Hour, tc.edit), export("east", time.Hour, nil)})
			if v.OldestCluster != "west" || len(v.Conflicts) != 1 || !slices.Equal(v.Conflicts[0].Clusters, []federation.ClusterID{"east"}) {
				t.Errorf("with west oldest: oldest %s, conflicts %+v", v.OldestCluster, v.Conflicts)
			}
		})
	}
	t.Run("ties go to the lowest cluster ID", func(t *testing.T) {
		v := MergeService([]ClusterService{export("west", 0, func(s *federationpb.Service) { s.TrafficDistribution = "PreferClose" }), export("east", 0, nil)})
		if v.OldestCluster != "east" || v.Oldest.GetTrafficDistribution() != "" {
			t.Errorf("oldest %s", v.OldestCluster)
		}
	})
	t.Run("agreeing exports have no conflict", func(t *testing.T) {
		same := func(s *federationpb.Service) {
			s.SessionAffinity, s.SessionAffinityTimeoutSeconds = federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP, 30
			s.Export.Labels = kv("tier", "web")
		}
		if v := MergeService([]ClusterService{export("west", 0, same), export("east", time.Hour, same)}); len(v.Conflicts) != 0 {
			t.Errorf("conflicts %+v", v.Conflicts)
		}
	})
}

func TestImportFamilies(t *testing.T) {
	for _, tc := range []struct {
		fams []federationpb.IPFamily
		ips  []string
		want []federationpb.IPFamily
	}{
		{fams: []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV6, federationpb.IPFamily_IP_FAMILY_IPV4}, want: []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV6, federationpb.IPFamily_IP_FAMILY_IPV4}},
		{ips: []string{"fd00::1"}, want: []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV6}},
		{want: []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4}},
	} {
		v := MergeService([]ClusterService{export("east", 0, func(s *federationpb.Service) { s.IpFamilies, s.ClusterIps = tc.fams, tc.ips })})
		if got := v.ImportFamilies(); !slices.Equal(got, tc.want) {
			t.Errorf("families %v, cluster IPs %v: import families %v, want %v", tc.fams, tc.ips, got, tc.want)
		}
	}
}
