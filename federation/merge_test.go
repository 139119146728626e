package federation

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/federation/federationpb"
)

func export(cluster ClusterID, age time.Duration, edit func(*federationpb.Service)) ClusterService {
	s := validService()
	s.Export.Time = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age))
	if edit != nil {
		edit(s)
	}
	return ClusterService{Cluster: cluster, Network: NetworkID("net-" + cluster), Service: s}
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
		want := []Conflict{{Reason: ReasonTypeConflict, Clusters: []ClusterID{"east"}, Message: v.Conflicts[0].Message}}
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
	a, b := validEndpoint(), validEndpoint()
	b.Address, b.Network = "10.0.0.0", "other"
	got := TagEndpoints("east", "n1", []*federationpb.Endpoint{a, b})
	if got[0].GetAddress() != "10.0.0.0" || got[0].Network != "other" || got[1].Network != "n1" || got[1].Cluster != "east" {
		t.Errorf("tagged %+v", got)
	}
}
