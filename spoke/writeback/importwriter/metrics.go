package importwriter

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the writer's; they work unregistered.
type metrics struct {
	notOurs prometheus.Gauge
	writes  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		notOurs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_spoke_import_conflicts",
			Help: "Imports the spoke does not write because an object it does not own (no app.kubernetes.io/managed-by=meshfed-spoke, or endpointslice.kubernetes.io/managed-by=spoke.meshfed.io) has the name of their ServiceImport or one of their EndpointSlices.",
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_spoke_import_writes_total",
			Help: "Requests the spoke sent to write the imports into its cluster, by kind, verb and result (ok or error).",
		}, []string{"kind", "verb", "result"}),
	}
	if reg != nil {
		m.notOurs = register(reg, m.notOurs)
		m.writes = register(reg, m.writes)
	}
	return m
}

func (m *metrics) write(kind, verb string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.writes.WithLabelValues(kind, verb, result).Inc()
}

// register registers c, or returns the collector registered before it
// under the same name (a second writer on one registry shares it).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
