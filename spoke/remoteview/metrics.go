package remoteview

import (
	"github.com/prometheus/client_golang/prometheus"
)

// viewMetrics are the views'; they work unregistered.
type viewMetrics struct {
	members  prometheus.Gauge
	requests *prometheus.CounterVec
	inFlight prometheus.Gauge
}

func newViewMetrics(reg prometheus.Registerer) *viewMetrics {
	m := &viewMetrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_spoke_remote_views",
			Help: "Members the spoke serves its istiod a remote view of (0 before the first set of imports).",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_spoke_remote_view_requests_total",
			Help: "Requests to the remote views, by method and status code (401: a bad token; 503: no set of imports yet).",
		}, []string{"method", "code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_spoke_remote_view_requests_in_flight",
			Help: "Requests the remote views are answering: mostly istiod's open watches (about nine per member per istiod).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.members, m.requests, m.inFlight)
	}
	return m
}

// secretMetrics are the remote secrets'; they work unregistered.
type secretMetrics struct {
	secrets  prometheus.Gauge
	failures prometheus.Counter
}

func newSecretMetrics(reg prometheus.Registerer) *secretMetrics {
	m := &secretMetrics{
		secrets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_spoke_remote_secrets",
			Help: "Remote secrets the spoke keeps in istiod's namespace, as of its last successful sync.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshfed_spoke_remote_secret_sync_failures_total",
			Help: "Syncs of the remote secrets that failed (the log says why: RBAC, a missing owner ConfigMap); each is retried.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.secrets, m.failures)
	}
	return m
}
