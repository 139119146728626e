package shard

import (
	"errors"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// Reporter is told about the objects the builder rejects (see
// [normalize.Rejection]), besides the builder's own log lines and metrics.
// The kube source is one: it records Kubernetes Events and ServiceExport
// conditions.
//
// Its methods are called with the builder's lock held, from
// [Builder.Apply] or a resync: they must return quickly and must not call
// the builder.
type Reporter interface {
	// Rejected is called when an object becomes rejected, or is rejected
	// for another reason, field or value, or its last good version stops
	// (or starts) standing in for it. kept says whether the shard holds
	// its last good version; if not, the object is left out.
	Rejected(r normalize.Rejection, kept bool)
	// Accepted is called when a rejected object is good again, is gone,
	// or no longer matters to the shard (its service is not exported).
	Accepted(kind normalize.Kind, namespace, name string)
}

// objectRef names an input object.
type objectRef struct {
	kind            normalize.Kind
	namespace, name string
}

func refOf(r *normalize.Rejection) objectRef { return objectRef{r.Kind, r.Namespace, r.Name} }

// rejected is a rejection as the builder acted on it.
type rejected struct {
	normalize.Rejection
	kept bool
}

// same reports whether r says what s says: a renormalization that finds
// the same problem again is not reported again.
func (r rejected) same(s rejected) bool {
	return r.Reason == s.Reason && r.Field == s.Field && r.Value == s.Value && r.kept == s.kept
}

// rejections holds the objects rejected now, and reports changes: one log
// line per object and reason until it changes, metrics, and the Reporter.
type rejections struct {
	log      *slog.Logger
	reporter Reporter // nil: none
	current  map[objectRef]rejected
	objects  *prometheus.GaugeVec // nil: no metrics
	total    *prometheus.CounterVec
}

func newRejections(log *slog.Logger, reg prometheus.Registerer, reporter Reporter) *rejections {
	rs := &rejections{log: log, reporter: reporter, current: map[objectRef]rejected{}}
	if reg == nil {
		return rs
	}
	rs.objects = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshfed_spoke_rejected_objects",
		Help: "Objects the spoke rejects now (their last good version, if any, stays federated), by kind and reason.",
	}, []string{"kind", "reason"}))
	rs.total = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_spoke_rejections_total",
		Help: "Times an object became rejected, or rejected for another reason, field or value, by kind and reason.",
	}, []string{"kind", "reason"}))
	return rs
}

// register registers c, or returns the collector registered before it
// under the same name (a second builder on one registry shares it).
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

// reject records that an object is rejected.
func (rs *rejections) reject(r rejected) {
	ref := refOf(&r.Rejection)
	prev, had := rs.current[ref]
	rs.current[ref] = r
	if had && prev.same(r) {
		return
	}
	kind := r.Kind.String()
	if rs.objects != nil {
		if had {
			rs.objects.WithLabelValues(prev.Kind.String(), string(prev.Reason)).Dec()
		}
		rs.objects.WithLabelValues(kind, string(r.Reason)).Inc()
		if !had || prev.Reason != r.Reason || prev.Field != r.Field || prev.Value != r.Value {
			rs.total.WithLabelValues(kind, string(r.Reason)).Inc()
		}
	}
	msg := "object rejected; it is left out of the shard"
	if r.kept {
		msg = "object rejected; its last good version stays in the shard"
	}
	rs.log.Warn(msg, "kind", kind, "namespace", r.Namespace, "name", r.Name,
		"field", r.Field, "value", r.Value, "reason", string(r.Reason), "err", r.Message, "service", r.Service)
	if rs.reporter != nil {
		rs.reporter.Rejected(r.Rejection, r.kept)
	}
}

// accept records that an object is not rejected (any more), if owner
// ("" for a pod, else the service key) is what rejected it: an
// EndpointSlice that moved between services is the other one's now.
func (rs *rejections) accept(ref objectRef, owner string) {
	prev, had := rs.current[ref]
	if !had || prev.Service != owner {
		return
	}
	delete(rs.current, ref)
	if rs.objects != nil {
		rs.objects.WithLabelValues(prev.Kind.String(), string(prev.Reason)).Dec()
	}
	rs.log.Info("object no longer rejected", "kind", ref.kind.String(), "namespace", ref.namespace, "name", ref.name)
	if rs.reporter != nil {
		rs.reporter.Accepted(ref.kind, ref.namespace, ref.name)
	}
}

// replace records the rejections one service's renormalization found (of
// the Service and its slices), accepting those it found before and not now.
func (rs *rejections) replace(service string, before []objectRef, found []rejected) []objectRef {
	var refs []objectRef
	for _, r := range found {
		rs.reject(r)
		refs = append(refs, refOf(&r.Rejection))
	}
	for _, ref := range before {
		if !slices.Contains(refs, ref) {
			rs.accept(ref, service)
		}
	}
	return refs
}
