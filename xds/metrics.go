package xds

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	proxies  prometheus.Gauge
	nacks    *prometheus.CounterVec
	refused  *prometheus.CounterVec
	pushes   prometheus.Counter
	pushTime prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, encoded func() int64) *metrics {
	m := &metrics{
		proxies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshfed_xds_proxies", Help: "Connected xDS streams."}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_nacks_total", Help: "Responses proxies rejected, per type.",
		}, []string{"type"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_streams_refused_total",
			Help: "xDS streams refused, per reason: rate_limited, no_identity, trust_domain, cluster_trust_domain, denied (by the authorizer), invalid_node.",
		}, []string{"reason"}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshfed_xds_pushes_total", Help: "Pushes of registry changes."}),
		pushTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meshfed_xds_push_seconds", Help: "Time to generate and encode one push.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	encodes := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "meshfed_xds_resource_encodes_total", Help: "Resources encoded (once per version and view, never per proxy).",
	}, func() float64 { return float64(encoded()) })
	for _, r := range refusalReasons {
		m.refused.WithLabelValues(r) // every reason shows, at 0 until it happens
	}
	if reg != nil {
		reg.MustRegister(m.proxies, m.nacks, m.refused, m.pushes, m.pushTime, encodes)
	}
	return m
}
