package debug

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/federation"
)

// ClusterCollector exports every cluster's lease as metrics, read from
// the registry's status at each scrape:
//
//	meshfed_hub_cluster_state{cluster,state}               1 for the cluster's state, 0 for the others
//	meshfed_hub_cluster_last_seen_timestamp_seconds{cluster} when the hub last heard from its spoke
//	meshfed_hub_policy_refusals_total{cluster}              updates refused by the cluster policy
type ClusterCollector struct{ src Source }

// NewClusterCollector returns a collector over src's status.
func NewClusterCollector(src Source) *ClusterCollector { return &ClusterCollector{src: src} }

var (
	clusterStateDesc = prometheus.NewDesc("meshfed_hub_cluster_state",
		"A cluster's lease: 1 for its state (live, stale or withdrawn), 0 for the others.", []string{"cluster", "state"}, nil)
	clusterLastSeenDesc = prometheus.NewDesc("meshfed_hub_cluster_last_seen_timestamp_seconds",
		"When the hub last heard from a cluster's spoke (now while its stream is up).", []string{"cluster"}, nil)
	policyRefusalsDesc = prometheus.NewDesc("meshfed_hub_policy_refusals_total",
		"Shard updates of a cluster refused because the cluster policy does not allow something in them (the Nack and the hub's log name the object and field).", []string{"cluster"}, nil)
)

// Describe implements prometheus.Collector.
func (c *ClusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- clusterStateDesc
	ch <- clusterLastSeenDesc
	ch <- policyRefusalsDesc
}

// Collect implements prometheus.Collector.
func (c *ClusterCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.src.Status() {
		id := string(st.ID)
		for _, state := range federation.ClusterStates {
			v := 0.0
			if st.State == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(clusterStateDesc, prometheus.GaugeValue, v, id, state.String())
		}
		if !st.LastSeen.IsZero() {
			ch <- prometheus.MustNewConstMetric(clusterLastSeenDesc, prometheus.GaugeValue,
				float64(st.LastSeen.UnixNano())/1e9, id)
		}
		ch <- prometheus.MustNewConstMetric(policyRefusalsDesc, prometheus.CounterValue, float64(st.PolicyRefusals), id)
	}
}
