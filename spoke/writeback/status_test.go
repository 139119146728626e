package writeback

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
)

// exportsCluster holds what decides the fixture's ServiceExports'
// validity: echo (valid), ext (an ExternalName: invalid) and ghost (no
// Service). Each export carries a condition of another controller,
// which the write-back keeps; with valid, also the Valid condition the
// write-back would write.
func exportsCluster(t *testing.T, valid bool) *kubetest.Cluster {
	t.Helper()
	c := kubetest.Start(t, 1)[0]
	ctx := t.Context()
	createNamespace(t, c, "demo")
	for _, svc := range []*corev1.Service{
		normalizetest.Service("demo", "echo", nil, nil, corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080, Protocol: corev1.ProtocolTCP}},
		}),
		normalizetest.Service("demo", "ext", nil, nil, corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}),
	} {
		svc.ObjectMeta = metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name}
		_, err := c.Client.CoreV1().Services("demo").Create(ctx, svc, metav1.CreateOptions{})
		must(t, err)
	}
	var in *normalizetest.Inputs
	if valid {
		svcs, err := c.Client.CoreV1().Services("demo").List(ctx, metav1.ListOptions{})
		must(t, err)
		var objs []metav1.Object
		for i := range svcs.Items {
			objs = append(objs, &svcs.Items[i])
		}
		in = normalizetest.NewInputs(objs...)
	}
	exports := c.MCS.MulticlusterV1beta1().ServiceExports("demo")
	for _, name := range []string{"echo", "ext", "ghost"} {
		se, err := exports.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name}}, metav1.CreateOptions{})
		must(t, err)
		se.Status.Conditions = []metav1.Condition{{
			Type: "Conflict", Status: metav1.ConditionFalse, Reason: "NoConflicts", LastTransitionTime: normalizetest.Created,
		}}
		if valid {
			in.Put(se)
			_, st, _ := normalize.Service(in, normalizetest.Options, "demo", name)
			cond, _ := validCondition(st, se.Generation, normalizetest.Created.Time)
			se.Status.Conditions = append(se.Status.Conditions, cond)
		}
		_, err = exports.UpdateStatus(ctx, se, metav1.UpdateOptions{})
		must(t, err)
	}
	return c
}

// statusWrites counts the ServiceExport status updates a transport
// carries, and fails the first ones it is told to.
type statusWrites struct {
	n, fail atomic.Int32
}

func (w *statusWrites) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/serviceexports/") && strings.HasSuffix(req.URL.Path, "/status") {
			w.n.Add(1)
			if w.fail.Add(-1) >= 0 {
				return &http.Response{
					StatusCode: http.StatusInternalServerError, Request: req, Header: http.Header{"Content-Type": {"application/json"}},
					Body: http.NoBody,
				}, nil
			}
		}
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func valid(t *testing.T, c *kubetest.Cluster, name string) metav1.Condition {
	t.Helper()
	se, err := c.MCS.MulticlusterV1beta1().ServiceExports("demo").Get(t.Context(), name, metav1.GetOptions{})
	must(t, err)
	for _, c := range se.Status.Conditions {
		if c.Type == "Valid" {
			return c
		}
	}
	t.Fatalf("ServiceExport demo/%s has no Valid condition: %v", name, se.Status.Conditions)
	return metav1.Condition{}
}

func checkValid(t *testing.T, got metav1.Condition, status metav1.ConditionStatus, reason string) {
	t.Helper()
	want := metav1.Condition{Type: "Valid", Status: status, Reason: reason, ObservedGeneration: 1}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(metav1.Condition{}, "Message", "LastTransitionTime")); diff != "" {
		t.Errorf("Valid condition (-want +got):\n%s", diff)
	}
	if got.Message == "" || got.LastTransitionTime.IsZero() {
		t.Errorf("Valid condition without message or transition time: %+v", got)
	}
}

func TestServiceExportStatus(t *testing.T) {
	c := exportsCluster(t, false)
	var writes statusWrites
	r := run(t, c, withTransport(writes.wrap))
	for _, key := range []string{"demo/echo", "demo/ext", "demo/ghost"} {
		if e := r.nextStatus(t, key); !e.updated || e.err != nil {
			t.Fatalf("first check of %s: %+v, want a write", key, e)
		}
	}
	checkValid(t, valid(t, c, "echo"), metav1.ConditionTrue, "Valid")
	checkValid(t, valid(t, c, "ext"), metav1.ConditionFalse, normalize.ReasonInvalidServiceType)
	checkValid(t, valid(t, c, "ghost"), metav1.ConditionFalse, normalize.ReasonNoService)
	se, err := c.MCS.MulticlusterV1beta1().ServiceExports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
	must(t, err)
	if len(se.Status.Conditions) != 2 {
		t.Errorf("conditions %v, want the other controller's Conflict condition kept", se.Status.Conditions)
	}
	if n := writes.n.Load(); n != 3 {
		t.Errorf("%d status writes, want 3", n)
	}
}

// A restarted spoke finds the conditions it wrote: it writes nothing until
// an export's validity changes.
func TestServiceExportStatusNotRewritten(t *testing.T) {
	c := exportsCluster(t, true)
	var writes statusWrites
	r := run(t, c, withTransport(writes.wrap))
	ctx := t.Context()
	services := c.Client.CoreV1().Services("demo")
	for _, key := range []string{"demo/echo", "demo/ext", "demo/ghost"} {
		if e := r.nextStatus(t, key); e.updated || e.err != nil {
			t.Errorf("first check of %s: %+v, want no write", key, e)
		}
	}

	// A change of the Service that leaves the export valid writes nothing.
	svc, err := services.Get(ctx, "echo", metav1.GetOptions{})
	must(t, err)
	svc.Spec.Ports[0].Port = 8081
	_, err = services.Update(ctx, svc, metav1.UpdateOptions{})
	must(t, err)
	if e := r.nextStatus(t, "demo/echo"); e.updated || e.err != nil {
		t.Errorf("check after an irrelevant Service change: %+v, want no write", e)
	}
	if n := writes.n.Load(); n != 0 {
		t.Errorf("%d status writes, want none", n)
	}

	// The Service goes: NoService. A Service for the ghost: Valid.
	must(t, services.Delete(ctx, "echo", metav1.DeleteOptions{}))
	if e := r.nextStatus(t, "demo/echo"); !e.updated {
		t.Fatalf("check after the Service was deleted: %+v, want a write", e)
	}
	checkValid(t, valid(t, c, "echo"), metav1.ConditionFalse, normalize.ReasonNoService)
	ghost := normalizetest.Service("demo", "ghost", nil, nil, corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}})
	ghost.ObjectMeta = metav1.ObjectMeta{Namespace: "demo", Name: "ghost"}
	_, err = services.Create(ctx, ghost, metav1.CreateOptions{})
	must(t, err)
	if e := r.nextStatus(t, "demo/ghost"); !e.updated {
		t.Fatalf("check after the ghost's Service appeared: %+v, want a write", e)
	}
	checkValid(t, valid(t, c, "ghost"), metav1.ConditionTrue, "Valid")
	if n := writes.n.Load(); n != 2 {
		t.Errorf("%d status writes, want 2", n)
	}
}

func TestServiceExportStatusRetries(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	ctx := t.Context()
	createNamespace(t, c, "demo")
	_, err := c.Client.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = c.MCS.MulticlusterV1beta1().ServiceExports("demo").Create(ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}}, metav1.CreateOptions{})
	must(t, err)
	var writes statusWrites
	writes.fail.Store(2) // the API server is busy twice
	r := run(t, c, withTransport(writes.wrap))
	for range 2 {
		if e := r.nextStatus(t, "demo/echo"); e.err == nil {
			t.Fatalf("check %+v, want the injected error", e)
		}
	}
	if e := r.nextStatus(t, "demo/echo"); !e.updated || e.err != nil {
		t.Fatalf("retry %+v, want a write", e)
	}
	checkValid(t, valid(t, c, "echo"), metav1.ConditionTrue, "Valid")
}

func TestValidCondition(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		st     normalize.ExportStatus
		want   metav1.ConditionStatus
		reason string
		ok     bool
	}{
		{normalize.ExportStatus{Exported: true}, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonValid), true},
		{normalize.ExportStatus{Reason: normalize.ReasonNoService, Message: "gone"}, metav1.ConditionFalse, normalize.ReasonNoService, true},
		{normalize.ExportStatus{}, "", "", false},
	}
	for _, tt := range tests {
		c, ok := validCondition(tt.st, 7, now)
		if ok != tt.ok || c.Status != tt.want || c.Reason != tt.reason || (ok && (c.ObservedGeneration != 7 || !c.LastTransitionTime.Time.Equal(now))) {
			t.Errorf("validCondition(%+v) = %+v, %v", tt.st, c, ok)
		}
	}
}
