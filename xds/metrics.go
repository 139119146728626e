package xds

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/xds/resources"
)

type metrics struct {
	// propagation times changes from a spoke observing them to a proxy
	// ACKing the response that brought them.
	propagation *prometheus.HistogramVec
	proxies     prometheus.Gauge
	nacks       *prometheus.CounterVec
	refused     *prometheus.CounterVec
	pushes      prometheus.Counter
	pushTime    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, encoded func() int64) *metrics {
	m := &metrics{
		proxies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshfed_xds_proxies", Help: "Connected xDS streams."}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_nacks_total", Help: "Responses proxies rejected, per type.",
		}, []string{"type"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_streams_refused_total",
			Help: "xDS streams refused, per reason: rate_limited, no_identity, trust_domain, cluster_trust_domain, denied (by the authorizer), invalid_node, workload_api (the hub does not serve ztunnels: --xds-workload-api).",
		}, []string{"reason"}),
		propagation: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshfed_propagation_seconds",
			Help:    "End-to-end propagation: from a spoke observing a change in its cluster to each proxy that should receive it ACKing the response that carried it, per xDS type and proxy kind (grpc, envoy, ztunnel). The spoke's clock is read in the hub's through an offset estimated on its stream, which can make a time short by the stream's shortest one-way delay, never long.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"type", "kind"}),
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
	// The series of every type each kind of proxy watches exist from the
	// start, so that dashboards and rate() see the first change.
	for _, s := range kindTypes {
		m.propagation.WithLabelValues(s.typ, s.kind)
	}
	// Every type served shows at 0 too, so that increase() sees a type's
	// first NACK.
	for _, t := range []string{resources.ClusterType, resources.EndpointType, resources.ListenerType, resources.RouteType, AddressType, AuthorizationType} {
		m.nacks.WithLabelValues(t)
	}
	if reg != nil {
		reg.MustRegister(m.propagation, m.proxies, m.nacks, m.refused, m.pushes, m.pushTime, encodes)
	}
	return m
}

// behindCollector exports, at each scrape, the proxies that have yet to
// ACK the newest state of what they watch, from the proxy book:
//
//	meshfed_proxy_behind{type,kind}          proxies behind (STALE) per type and kind
//	meshfed_proxy_behind_seconds{type,kind}  the longest of them: since a spoke observed the oldest change one of them lacks
type behindCollector struct{ s *Server }

var (
	behindDesc = prometheus.NewDesc("meshfed_proxy_behind",
		"Proxies whose last ACK of a type is older than the newest state of what they watch (sent and not yet ACKed, or not yet sent), per xDS type and proxy kind.",
		[]string{"type", "kind"}, nil)
	behindSecondsDesc = prometheus.NewDesc("meshfed_proxy_behind_seconds",
		"For the proxies behind, the longest time since a spoke observed a change one of them has yet to ACK, per xDS type and proxy kind.",
		[]string{"type", "kind"}, nil)
)

// Describe implements prometheus.Collector.
func (c behindCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- behindDesc
	ch <- behindSecondsDesc
}

// kindTypes are the types each kind of proxy watches: gRPC clients and
// Envoy the four xDS types, ztunnels the workload API's addresses.
var kindTypes = func() []struct{ typ, kind string } {
	var out []struct{ typ, kind string }
	for _, kind := range []string{kindGRPC, kindEnvoy} {
		for _, typ := range []string{"Cluster", "ClusterLoadAssignment", "Listener", "RouteConfiguration"} {
			out = append(out, struct{ typ, kind string }{typ, kind})
		}
	}
	return append(out, struct{ typ, kind string }{"Address", kindZtunnel})
}()

// Collect implements prometheus.Collector.
func (c behindCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ typ, kind string }
	count, longest := map[key]int{}, map[key]float64{}
	for _, s := range kindTypes {
		count[key{s.typ, s.kind}] = 0
	}
	for _, p := range c.s.Proxies() {
		for typeURL, t := range p.Types {
			k := key{typeLabel(typeURL), p.Kind}
			if _, ok := count[k]; !ok {
				count[k] = 0
			}
			if t.State == StateStale {
				count[k]++
				longest[k] = max(longest[k], t.BehindSeconds)
			}
		}
	}
	for k, n := range count {
		ch <- prometheus.MustNewConstMetric(behindDesc, prometheus.GaugeValue, float64(n), k.typ, k.kind)
		ch <- prometheus.MustNewConstMetric(behindSecondsDesc, prometheus.GaugeValue, longest[k], k.typ, k.kind)
	}
}
