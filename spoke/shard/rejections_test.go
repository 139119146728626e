package shard

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
)

// rejectionFixture is a cluster whose service demo/echo has one slice of
// three endpoints and a pod behind the first, run through a builder with
// metrics, a log and a reporter.
type rejectionFixture struct {
	in       *normalizetest.Inputs
	tr       tracked
	b        *Builder
	reg      *prometheus.Registry
	logs     *bytes.Buffer
	reported *recordingReporter
}

func echoService(port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", CreationTimestamp: metav1.Unix(1000, 0)},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "grpc", Port: port, Protocol: corev1.ProtocolTCP}}},
	}
}

// echoSlice returns a slice of the service echo whose endpoints have the
// addresses given, the first ready only when ready is.
func echoSlice(name string, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](8080)}},
	}
	for i, a := range addrs {
		e := discoveryv1.Endpoint{Addresses: []string{a}}
		if i == 0 {
			e.Conditions.Ready = ptr.To(ready)
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "echo-a"}
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

func echoPod(ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo-a", UID: "uid-echo-a"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func newRejectionFixture(t *testing.T) *rejectionFixture {
	t.Helper()
	f := &rejectionFixture{
		in: normalizetest.NewInputs(
			echoService(8080), echoPod("10.0.0.1"), echoSlice("echo-1", true, "10.0.0.1", "10.0.0.2", "10.0.0.3"),
			&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", CreationTimestamp: metav1.Unix(1000, 0)}},
		),
		tr:       newTracked(),
		reg:      prometheus.NewRegistry(),
		logs:     &bytes.Buffer{},
		reported: &recordingReporter{},
	}
	log := slog.New(slog.NewTextHandler(f.logs, nil)).With("cluster", "east")
	f.b = NewBuilder(normalize.Options{ClusterID: "east", Network: "n1"}, f.tr.Tracker, log, WithMetrics(f.reg), WithReporter(f.reported))
	runBuilder(t, f.b)
	f.b.Apply(f.in, nil)
	f.send(t)
	return f
}

// send returns the next update, acknowledged (nil for none).
func (f *rejectionFixture) send(t *testing.T) *federationpb.ShardUpdate {
	t.Helper()
	u := next(t, f.tr, "n")
	if u != nil {
		f.tr.Acked(u.GetVersion())
	}
	return u
}

// put replaces objects, as a source does, and applies the change.
func (f *rejectionFixture) put(objs ...metav1.Object) {
	var changes []normalize.Change
	for _, o := range objs {
		c := normalize.Change{Namespace: o.GetNamespace(), Name: o.GetName()}
		switch o := o.(type) {
		case *corev1.Service:
			c.Kind = normalize.KindService
		case *discoveryv1.EndpointSlice:
			c.Kind, c.Name = normalize.KindEndpointSlice, o.Labels[discoveryv1.LabelServiceName]
		case *corev1.Pod:
			c.Kind = normalize.KindPod
		}
		changes = append(changes, c)
	}
	f.in.Put(objs...)
	f.b.Apply(f.in, changes)
}

func (f *rejectionFixture) gauge(kind, reason string) float64 {
	return testutil.ToFloat64(f.b.rejections.objects.WithLabelValues(kind, reason))
}

func (f *rejectionFixture) total(kind, reason string) float64 {
	return testutil.ToFloat64(f.b.rejections.total.WithLabelValues(kind, reason))
}

// logLines returns the log lines that contain every one of parts.
func (f *rejectionFixture) logLines(parts ...string) []string {
	var out []string
	for line := range strings.Lines(f.logs.String()) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			out = append(out, line)
		}
	}
	return out
}

type recordingReporter struct {
	mu     sync.Mutex
	events []string
}

func (r *recordingReporter) Rejected(rej normalize.Rejection, kept bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "rejected "+rej.Object()+" "+string(rej.Reason)+" kept="+map[bool]string{true: "yes", false: "no"}[kept])
}

func (r *recordingReporter) Accepted(kind normalize.Kind, namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "accepted "+kind.String()+" "+namespace+"/"+name)
}

func (r *recordingReporter) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func allReady(eps []*federationpb.Endpoint) bool {
	for _, e := range eps {
		if !e.GetReady() {
			return false
		}
	}
	return true
}

func endpointAt(eps []*federationpb.Endpoint, address string) *federationpb.Endpoint {
	for _, e := range eps {
		if e.GetAddress() == address {
			return e
		}
	}
	return nil
}

// addresses returns the endpoints' addresses, sorted: an update lists
// its objects in no particular order.
func addresses(eps []*federationpb.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.GetAddress())
	}
	slices.Sort(out)
	return out
}

// A slice with one bad address keeps its last good version as a whole:
// its three endpoints, as they were, even those the bad version changed.
func TestBuilderKeepsLastGoodSlice(t *testing.T) {
	f := newRejectionFixture(t)
	f.put(echoSlice("echo-1", false, "10.0.0.1", "10.0.0.2", "999.1.1.1"))
	if u := f.send(t); u != nil {
		t.Errorf("sent %v, want nothing: the last good slice stays", u)
	}
	if _, eps, _ := f.tr.Counts(); eps != 3 {
		t.Errorf("%d endpoints, want the last good version's 3", eps)
	}
	if g, n := f.gauge("EndpointSlice", "InvalidAddress"), f.total("EndpointSlice", "InvalidAddress"); g != 1 || n != 1 {
		t.Errorf("rejected objects %v, rejections %v; want 1 and 1", g, n)
	}
	if lines := f.logLines("object rejected; its last good version stays", "cluster=east", "kind=EndpointSlice", "namespace=demo",
		"name=echo-1", "field=endpoints[2].addresses[0]", "value=999.1.1.1", "reason=InvalidAddress"); len(lines) != 1 {
		t.Errorf("log lines %q, want one naming cluster, object, field and value; logs:\n%s", lines, f.logs)
	}
	if got, want := f.reported.take(), []string{"rejected EndpointSlice demo/echo-1 InvalidAddress kept=yes"}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}

	// Renormalizing the service again (its Service changed, the pod did, a
	// resync) finds the same rejection: no new log line, count or report.
	f.put(echoService(8080), echoPod("10.0.0.1"))
	f.tr.Reconnected(false, 0)
	u := awaitNext(t, f.tr, "full")
	if got := addresses(u.GetEndpoints()); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}) || !allReady(u.GetEndpoints()) {
		t.Errorf("the full state's endpoints %v, want the last good slice's", u.GetEndpoints())
	}
	f.tr.Acked(u.GetVersion())
	if n := f.total("EndpointSlice", "InvalidAddress"); n != 1 || len(f.logLines("object rejected")) != 1 || len(f.reported.take()) != 0 {
		t.Errorf("after renormalizing: %v rejections, logs:\n%s", n, f.logs)
	}

	// Another bad value is another line.
	f.put(echoSlice("echo-1", false, "10.0.0.1", "10.0.0.2", "888.1.1.1"))
	if n := f.total("EndpointSlice", "InvalidAddress"); n != 2 || f.gauge("EndpointSlice", "InvalidAddress") != 1 || len(f.logLines("value=888.1.1.1")) != 1 {
		t.Errorf("after another bad value: %v rejections, logs:\n%s", n, f.logs)
	}
	f.reported.take()

	// Fixed: the new version replaces the last good one.
	f.put(echoSlice("echo-1", false, "10.0.0.1", "10.0.0.2", "10.0.0.4"))
	u = f.send(t)
	if got := addresses(u.GetEndpoints()); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.4"}) || endpointAt(u.GetEndpoints(), "10.0.0.1").GetReady() {
		t.Errorf("endpoints changed %v, want 10.0.0.1 (not ready) and 10.0.0.4", u.GetEndpoints())
	}
	if got := u.GetRemovedEndpoints(); !slices.Equal(got, []string{"demo/echo/10.0.0.3"}) {
		t.Errorf("removed %v, want demo/echo/10.0.0.3", got)
	}
	if g := f.gauge("EndpointSlice", "InvalidAddress"); g != 0 || len(f.logLines("object no longer rejected", "name=echo-1")) != 1 {
		t.Errorf("after the fix: %v rejected objects, logs:\n%s", g, f.logs)
	}
	if got, want := f.reported.take(), []string{"accepted EndpointSlice demo/echo-1"}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}
}

// A slice that was never good is left out; the service's other slices are
// federated.
func TestBuilderLeavesOutNewBadSlice(t *testing.T) {
	f := newRejectionFixture(t)
	bad := echoSlice("echo-2", true, "10.0.1.1")
	bad.Ports[0].Port = ptr.To[int32](70000)
	f.put(bad)
	if u := f.send(t); u != nil {
		t.Errorf("sent %v, want nothing", u)
	}
	if _, eps, _ := f.tr.Counts(); eps != 3 {
		t.Errorf("%d endpoints, want echo-1's 3", eps)
	}
	if g := f.gauge("EndpointSlice", "InvalidPort"); g != 1 || len(f.logLines("it is left out", "name=echo-2", "field=ports[0].port", "value=70000")) != 1 {
		t.Errorf("rejected objects %v; logs:\n%s", g, f.logs)
	}
	if got, want := f.reported.take(), []string{"rejected EndpointSlice demo/echo-2 InvalidPort kept=no"}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}

	// Deleted: no longer rejected.
	f.in.Delete(bad)
	f.b.Apply(f.in, []normalize.Change{{Kind: normalize.KindEndpointSlice, Namespace: "demo", Name: "echo"}})
	if g := f.gauge("EndpointSlice", "InvalidPort"); g != 0 {
		t.Errorf("%v rejected objects after the delete, want 0", g)
	}
	if got, want := f.reported.take(), []string{"accepted EndpointSlice demo/echo-2"}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}
}

// A Service with a bad port keeps its last good version, endpoints and
// workloads included; a new bad one is left out; fixed, it is back.
func TestBuilderKeepsLastGoodService(t *testing.T) {
	f := newRejectionFixture(t)
	f.put(echoService(70000))
	if u := f.send(t); u != nil {
		t.Errorf("sent %v, want nothing: the last good Service stays", u)
	}
	if s, e, w := f.tr.Counts(); s != 1 || e != 3 || w != 1 {
		t.Errorf("%d services, %d endpoints, %d workloads; want 1, 3, 1", s, e, w)
	}
	if g, n := f.gauge("Service", "InvalidPort"), f.total("Service", "InvalidPort"); g != 1 || n != 1 {
		t.Errorf("rejected objects %v, rejections %v; want 1 and 1", g, n)
	}
	if lines := f.logLines("kind=Service", "name=echo", "field=spec.ports[0].port", "value=70000", "reason=InvalidPort"); len(lines) != 1 {
		t.Errorf("log lines %q; logs:\n%s", lines, f.logs)
	}
	// Its slice changes meanwhile: the endpoints follow, under the last
	// good Service.
	f.put(echoSlice("echo-1", true, "10.0.0.1", "10.0.0.2"))
	if u := f.send(t); len(u.GetRemovedEndpoints()) != 1 || len(u.GetServices()) != 0 {
		t.Errorf("sent %v, want 10.0.0.3's removal only", u)
	}

	f.put(echoService(8081))
	u := f.send(t)
	if len(u.GetServices()) != 1 || u.GetServices()[0].GetPorts()[0].GetPort() != 8081 {
		t.Errorf("sent %v, want the fixed Service", u)
	}
	if g := f.gauge("Service", "InvalidPort"); g != 0 {
		t.Errorf("%v rejected objects after the fix, want 0", g)
	}

	// A new exported Service that was never good is left out.
	f.put(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "other", Labels: map[string]string{normalize.LabelExport: "true"}},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.11", Ports: []corev1.ServicePort{{Port: 0}}},
	})
	if s, _, _ := f.tr.Counts(); s != 1 {
		t.Errorf("%d services, want the bad new one left out", s)
	}
	if got := f.reported.take(); !slices.Contains(got, "rejected Service demo/other InvalidPort kept=no") {
		t.Errorf("reported %q", got)
	}
}

// A pod whose IP becomes unusable keeps its last good workload.
func TestBuilderKeepsLastGoodWorkload(t *testing.T) {
	f := newRejectionFixture(t)
	f.put(echoPod("0.0.0.0"))
	if u := f.send(t); u != nil {
		t.Errorf("sent %v, want nothing: the last good workload stays", u)
	}
	if _, _, w := f.tr.Counts(); w != 1 {
		t.Errorf("%d workloads, want 1", w)
	}
	if g := f.gauge("Pod", "InvalidAddress"); g != 1 || len(f.logLines("kind=Pod", "name=echo-a", "field=status.podIPs[0]", "value=0.0.0.0")) != 1 {
		t.Errorf("%v rejected pods; logs:\n%s", g, f.logs)
	}
	f.put(echoPod("10.0.0.1"))
	if g := f.gauge("Pod", "InvalidAddress"); g != 0 {
		t.Errorf("%v rejected pods after the fix, want 0", g)
	}
	if got, want := f.reported.take(), []string{"rejected Pod demo/echo-a InvalidAddress kept=yes", "accepted Pod demo/echo-a"}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}
}

// Without a registry the builder records no metrics, and still rejects.
func TestBuilderRejectsWithoutMetrics(t *testing.T) {
	in := normalizetest.NewInputs(echoService(70000),
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}})
	tr := newTracked()
	b := NewBuilder(normalize.Options{ClusterID: "east"}, tr.Tracker, slog.New(slog.DiscardHandler), WithMetrics(nil))
	b.Apply(in, nil)
	if s, _, _ := tr.Counts(); s != 0 {
		t.Errorf("%d services, want none", s)
	}
}
