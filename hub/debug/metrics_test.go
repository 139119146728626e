package debug

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/registry"
)

type fixedSource []registry.ClusterStatus

func (f fixedSource) Status() []registry.ClusterStatus { return f }
func (fixedSource) Current() *registry.Snapshot        { return nil }

func TestClusterCollector(t *testing.T) {
	seen := time.Unix(1_700_000_000, 500_000_000)
	src := fixedSource{
		{ID: "east", State: federation.Live, Connected: true, LastSeen: seen},
		{ID: "west", State: federation.Stale, LastSeen: seen.Add(-time.Minute), PolicyRefusals: 3},
	}
	want := `
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
# HELP meshfed_hub_policy_refusals_total Shard updates of a cluster refused because the cluster policy does not allow something in them (the Nack and the hub's log name the object and field).
# TYPE meshfed_hub_policy_refusals_total counter
meshfed_hub_policy_refusals_total{cluster="east"} 0
meshfed_hub_policy_refusals_total{cluster="west"} 3
`
	if err := testutil.CollectAndCompare(NewClusterCollector(src), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
