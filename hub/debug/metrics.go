package debug

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/clusterset"
)

// ClusterCollector exports every cluster's lease as metrics, read from
// the registry's status at each scrape:
//
//	meshfed_hub_cluster_state{cluster,state}               1 for the cluster's state, 0 for the others
//	meshfed_hub_cluster_last_seen_timestamp_seconds{cluster} when the hub last heard from its spoke
//	meshfed_hub_policy_refusals_total{cluster}              updates refused by the cluster policy
//	meshfed_hub_supersessions_total{cluster}                streams taken over by a spoke of another session
//	meshfed_hub_cluster_change_lag_seconds{cluster}         how long the newest change took from the spoke to the hub
//	meshfed_hub_imports                                     MCS imports (services exported with a ServiceExport)
//	meshfed_hub_import_ip_errors                            imports lacking a ClusterSetIP (--clusterset-cidr exhausted)
//	meshfed_hub_clusterset_ip_collisions                    ClusterSetIPs held for two imports (the older keeps it)
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
	supersessionsDesc = prometheus.NewDesc("meshfed_hub_supersessions_total",
		"Streams of a cluster taken over, while they were up, by a spoke of another session: a spoke pod replaced, or two spokes running for one cluster when it keeps growing.", []string{"cluster"}, nil)
	changeLagDesc = prometheus.NewDesc("meshfed_hub_cluster_change_lag_seconds",
		"How long the cluster's newest change took from its spoke observing it to the hub applying it (the LAG of meshfed status; includes clock skew between the two). Absent until a change arrives.", []string{"cluster"}, nil)
	importsDesc = prometheus.NewDesc("meshfed_hub_imports",
		"MCS imports: services some cluster exports with a ServiceExport, each a ServiceImport in every member cluster.", nil, nil)
	importIPErrorsDesc = prometheus.NewDesc("meshfed_hub_import_ip_errors",
		"MCS imports lacking a ClusterSetIP of a family they need (its --clusterset-cidr is exhausted, or none is given); /debug/services says which.", nil, nil)
	collisionsDesc = prometheus.NewDesc("meshfed_hub_clusterset_ip_collisions",
		"ClusterSetIPs the member clusters hold for two imports: the older import keeps each, the other got a new one (/debug/services names them).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *ClusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- clusterStateDesc
	ch <- clusterLastSeenDesc
	ch <- policyRefusalsDesc
	ch <- supersessionsDesc
	ch <- changeLagDesc
	ch <- importsDesc
	ch <- importIPErrorsDesc
	ch <- collisionsDesc
}

// Collect implements prometheus.Collector.
func (c *ClusterCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.src.Status() {
		id := string(st.ID)
		for _, state := range clusterset.ClusterStates {
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
		ch <- prometheus.MustNewConstMetric(supersessionsDesc, prometheus.CounterValue, float64(st.Supersessions), id)
		if !st.LastChangeAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(changeLagDesc, prometheus.GaugeValue, st.LastChangeAt.Sub(st.LastChangeObservedAt).Seconds(), id)
		}
	}
	if snap := c.src.Current(); snap != nil {
		imports, ipErrors := 0, 0
		for _, v := range snap.Services() {
			if v.IsImport() {
				imports++
				if snap.Import(v.Key).IPError != "" {
					ipErrors++
				}
			}
		}
		ch <- prometheus.MustNewConstMetric(importsDesc, prometheus.GaugeValue, float64(imports))
		ch <- prometheus.MustNewConstMetric(importIPErrorsDesc, prometheus.GaugeValue, float64(ipErrors))
	}
	ch <- prometheus.MustNewConstMetric(collisionsDesc, prometheus.GaugeValue, float64(len(c.src.ClustersetIPCollisions())))
}
