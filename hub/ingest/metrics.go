package ingest

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/federation"
)

// Metrics are the ingest server's Prometheus metrics. A nil *Metrics
// records nothing.
type Metrics struct {
	streams  *prometheus.GaugeVec
	updates  *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	refusals *prometheus.CounterVec
	delay    prometheus.Histogram
}

// NewMetrics registers the ingest metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshfed_hub_spoke_streams", Help: "Connected spoke streams per cluster.",
		}, []string{"cluster"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_hub_shard_updates_total", Help: "Shard updates per cluster and result (ack or nack).",
		}, []string{"cluster", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_hub_shard_received_bytes_total", Help: "Bytes of shard updates received per cluster.",
		}, []string{"cluster"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_hub_spoke_refusals_total",
			Help: "Streams refused, by reason: cluster_mismatch (the claimed cluster is not the credential's) not_admitted (the cluster policy does not name the cluster), duplicate (a spoke that another spoke of the same cluster took the stream from, while that one streams), or other_clusterset (the cluster's About API names another clusterset than the hub's --clusterset).",
		}, []string{"reason"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshfed_hub_ingest_delay_seconds",
			Help:    "From the spoke observing a change to the hub applying it (includes clock skew between the two).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	// Both series exist from the start, so that rate() sees the first one.
	m.refusals.WithLabelValues(refusedMismatch)
	m.refusals.WithLabelValues(refusedNotAdmitted)
	m.refusals.WithLabelValues(refusedDuplicate)
	reg.MustRegister(m.streams, m.updates, m.bytes, m.refusals, m.delay)
	return m
}

func (m *Metrics) connected(id federation.ClusterID, delta float64) {
	if m != nil {
		m.streams.WithLabelValues(string(id)).Add(delta)
		// Both results exist from the cluster's first stream, so that
		// increase() sees its first Nack.
		m.updates.WithLabelValues(string(id), "ack")
		m.updates.WithLabelValues(string(id), "nack")
	}
}

func (m *Metrics) received(id federation.ClusterID, n int) {
	if m != nil {
		m.bytes.WithLabelValues(string(id)).Add(float64(n))
	}
}

func (m *Metrics) update(id federation.ClusterID, result string) {
	if m != nil {
		m.updates.WithLabelValues(string(id), result).Inc()
	}
}

// Reasons of meshfed_hub_spoke_refusals_total.
const (
	refusedMismatch    = "cluster_mismatch"
	refusedNotAdmitted = "not_admitted"
	refusedDuplicate   = "duplicate"
	// refusedOtherClusterset: the cluster's About API names another
	// clusterset than the hub's --clusterset.
	refusedOtherClusterset = "other_clusterset"
)

func (m *Metrics) refused(reason string) {
	if m != nil {
		m.refusals.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) observeDelay(d time.Duration) {
	if m != nil {
		m.delay.Observe(d.Seconds())
	}
}
