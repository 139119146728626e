package hub

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/registry"
)

func shard(id string) *federationpb.ShardUpdate {
	return &federationpb.ShardUpdate{
		Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: id, Network: "n1"},
		Services: []*federationpb.Service{{
			Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local",
			Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
			Ports:  []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
			Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_LABEL},
		}},
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestWarmUpWaitsForConnectedSpokes: a spoke that has connected but not
// sent its shard holds the warm-up (whose limit is an hour here), and the
// snapshot it returns has that spoke's data.
func TestWarmUpWaitsForConnectedSpokes(t *testing.T) {
	reg := registry.New(registry.Limits{}, nil)
	if err := reg.Connect("east", "s").Apply("s", shard("east")); err != nil {
		t.Fatal(err)
	}
	west := reg.Connect("west", "s")
	done := make(chan *registry.Snapshot)
	go func() { done <- warmUp(t.Context(), reg, 20*time.Millisecond, time.Hour, quietLog) }()
	if err := west.Apply("s", shard("west")); err != nil {
		t.Fatal(err)
	}
	select {
	case snap := <-done:
		if _, ok := snap.Cluster("west"); !ok {
			t.Errorf("warm with west connected but not in the snapshot: %v", snap.Clusters())
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up never ended although both connected spokes sent their shards")
	}
}

// TestWarmUpGivesUp: with no spoke, the warm-up ends at its limit.
func TestWarmUpGivesUp(t *testing.T) {
	reg := registry.New(registry.Limits{}, nil)
	if snap := warmUp(t.Context(), reg, time.Hour, 50*time.Millisecond, quietLog); len(snap.Clusters()) != 0 {
		t.Errorf("clusters %v, want none", snap.Clusters())
	}
	if snap := warmUp(t.Context(), reg, time.Hour, 0, quietLog); snap != reg.Current() {
		t.Error("a warm-up of 0 did not return at once with the current snapshot")
	}
}
