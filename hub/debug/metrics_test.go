package debug

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/clustersetip"
	"github.com/meshfed/meshfed/hub/registry"
)

type fixedSource []registry.ClusterStatus

func (f fixedSource) Status() []registry.ClusterStatus { return f }
func (fixedSource) Current() clusterset.Snapshot       { return nil }

func (fixedSource) ClustersetIPCollisions() []clustersetip.Collision { return nil }

func TestClusterCollector(t *testing.T) {
	seen := time.Unix(1_700_000_000, 500_000_000)
	src := fixedSource{
		{
			ID: "east", State: clusterset.Live, Connected: true, LastSeen: seen, Supersessions: 1,
			LastChangeAt: seen, LastChangeObservedAt: seen.Add(-1500 * time.Millisecond),
		},
		{ID: "west", State: clusterset.Stale, LastSeen: seen.Add(-time.Minute), PolicyRefusals: 3},
	}
	want := `
# HELP meshfed_hub_cluster_change_lag_seconds How long the cluster's newest change took from its spoke observing it to the hub applying it (the LAG of meshfed status; includes clock skew between the two). Absent until a change arrives.
# TYPE meshfed_hub_cluster_change_lag_seconds gauge
meshfed_hub_cluster_change_lag_seconds{cluster="east"} 1.5
# HELP meshfed_hub_cluster_last_seen_timestamp_seconds When the hub last heard from a cluster's spoke (now while its stream is up).
# TYPE meshfed_hub_cluster_last_seen_timestamp_seconds gauge
meshfed_hub_cluster_last_seen_timestamp_seconds{cluster="east"} 1.7000000005e+09
meshfed_hub_cluster_last_seen_timestamp_seconds{cluster="west"} 1.6999999405e+09
# HELP meshfed_hub_cluster_state A cluster's lease: 1 for its state (live, stale or withdrawn), 0 for the others.
# TYPE meshfed_hub_cluster_state gauge
meshfed_hub_cluster_state{cluster="east",state="live"} 1
meshfed_hub_cluster_state{cluster="east",state="stale"} 0
meshfed_hub_cluster_state{cluster="east",state="withdrawn"} 0
meshfed_hub_cluster_state{cluster="west",state="live"} 0
meshfed_hub_cluster_state{cluster="west",state="stale"} 1
meshfed_hub_cluster_state{cluster="west",state="withdrawn"} 0
# HELP meshfed_hub_clusterset_ip_collisions ClusterSetIPs the member clusters hold for two imports: the older import keeps each, the other got a new one (/debug/services names them).
# TYPE meshfed_hub_clusterset_ip_collisions gauge
meshfed_hub_clusterset_ip_collisions 0
# HELP meshfed_hub_policy_refusals_total Shard updates of a cluster refused because the cluster policy does not allow something in them (the Nack and the hub's log name the object and field).
# TYPE meshfed_hub_policy_refusals_total counter
meshfed_hub_policy_refusals_total{cluster="east"} 0
meshfed_hub_policy_refusals_total{cluster="west"} 3
# HELP meshfed_hub_supersessions_total Streams of a cluster taken over, while they were up, by a spoke of another session: a spoke pod replaced, or two spokes running for one cluster when it keeps growing.
# TYPE meshfed_hub_supersessions_total counter
meshfed_hub_supersessions_total{cluster="east"} 1
meshfed_hub_supersessions_total{cluster="west"} 0
`
	if err := testutil.CollectAndCompare(NewClusterCollector(src), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestImportMetrics(t *testing.T) {
	pools, err := clustersetip.ParsePools("10.9.0.0/30") // two addresses
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Config{ClustersetPools: pools})
	var services []*federationpb.Service
	for _, name := range []string{"a", "b", "c"} {
		services = append(services, &federationpb.Service{
			Namespace: "demo", Name: name, Hostname: name + ".demo.svc.cluster.local", Type: federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
			Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT},
		})
	}
	if err := reg.Connect("east", "").Apply("s", &federationpb.ShardUpdate{Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: "east"}, Services: services}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP meshfed_hub_import_ip_errors MCS imports lacking a ClusterSetIP of a family they need (its --clusterset-cidr is exhausted, or none is given); /debug/services says which.
# TYPE meshfed_hub_import_ip_errors gauge
meshfed_hub_import_ip_errors 1
# HELP meshfed_hub_imports MCS imports: services some cluster exports with a ServiceExport, each a ServiceImport in every member cluster.
# TYPE meshfed_hub_imports gauge
meshfed_hub_imports 3
`
	if err := testutil.CollectAndCompare(NewClusterCollector(reg), strings.NewReader(want), "meshfed_hub_imports", "meshfed_hub_import_ip_errors"); err != nil {
		t.Error(err)
	}
}
