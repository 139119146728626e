package kube

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
)

// nextStatus waits for the next status check of key. Checks of other
// keys wait for their turn.
func (h *harness) nextStatus(t *testing.T, key string) statusEvent {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if q := h.statusByKey[key]; len(q) > 0 {
			h.statusByKey[key] = q[1:]
			return q[0]
		}
		select {
		case e := <-h.status:
			h.statusByKey[e.key] = append(h.statusByKey[e.key], e)
		case <-deadline:
			t.Fatalf("no status check of %s within %v; logs:\n%s", key, waitTimeout, h.logs)
		}
	}
}

// statusWrites counts the ServiceExport status updates sent.
func (h *harness) statusWrites() int {
	n := 0
	for _, a := range h.mcs.Actions() {
		if a.Matches("update", "serviceexports") && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func (h *harness) valid(t *testing.T, namespace, name string) metav1.Condition {
	t.Helper()
	se, err := h.mcs.MulticlusterV1beta1().ServiceExports(namespace).Get(t.Context(), name, metav1.GetOptions{})
	must(t, err)
	for _, c := range se.Status.Conditions {
		if c.Type == "Valid" {
			return c
		}
	}
	t.Fatalf("ServiceExport %s/%s has no Valid condition: %v", namespace, name, se.Status.Conditions)
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
	h := start(t, normalizetest.Cluster())
	h.started(t)
	for _, key := range []string{"demo/echo", "demo/ext", "demo/ghost"} {
		if e := h.nextStatus(t, key); !e.updated || e.err != nil {
			t.Fatalf("first check of %s: %+v, want a write", key, e)
		}
	}
	checkValid(t, h.valid(t, "demo", "echo"), metav1.ConditionTrue, "Valid")
	checkValid(t, h.valid(t, "demo", "ext"), metav1.ConditionFalse, normalize.ReasonInvalidServiceType)
	checkValid(t, h.valid(t, "demo", "ghost"), metav1.ConditionFalse, normalize.ReasonNoService)
	se, err := h.mcs.MulticlusterV1beta1().ServiceExports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
	must(t, err)
	if len(se.Status.Conditions) != 2 {
		t.Errorf("conditions %v, want the fixture's Conflict condition kept", se.Status.Conditions)
	}
	if n := h.statusWrites(); n != 3 {
		t.Errorf("%d status writes, want 3", n)
	}
}

// A restarted spoke finds the conditions it wrote: it writes nothing until
// an export's validity changes.
func TestServiceExportStatusNotRewritten(t *testing.T) {
	objs := normalizetest.Cluster()
	in := normalizetest.InputsOf(objs)
	for _, o := range objs {
		if se, ok := o.(*mcsv1beta1.ServiceExport); ok {
			_, st, _ := normalize.Service(in, normalizetest.Options, se.Namespace, se.Name)
			c, _ := validCondition(st, se.Generation, normalizetest.Created.Time)
			se.Status.Conditions = append(se.Status.Conditions, c)
		}
	}
	h := start(t, objs)
	h.started(t)
	ctx := t.Context()
	services := h.kube.CoreV1().Services("demo")
	for _, key := range []string{"demo/echo", "demo/ext", "demo/ghost"} {
		if e := h.nextStatus(t, key); e.updated || e.err != nil {
			t.Errorf("first check of %s: %+v, want no write", key, e)
		}
	}

	// A change of the Service that leaves the export valid writes nothing.
	svc, err := services.Get(ctx, "echo", metav1.GetOptions{})
	must(t, err)
	svc.Spec.Ports[0].Port = 8081
	_, err = services.Update(ctx, svc, metav1.UpdateOptions{})
	must(t, err)
	if e := h.nextStatus(t, "demo/echo"); e.updated || e.err != nil {
		t.Errorf("check after an irrelevant Service change: %+v, want no write", e)
	}
	if n := h.statusWrites(); n != 0 {
		t.Errorf("%d status writes, want none", n)
	}

	// The Service goes: NoService. A Service for the ghost: Valid.
	must(t, services.Delete(ctx, "echo", metav1.DeleteOptions{}))
	if e := h.nextStatus(t, "demo/echo"); !e.updated {
		t.Fatalf("check after the Service was deleted: %+v, want a write", e)
	}
	checkValid(t, h.valid(t, "demo", "echo"), metav1.ConditionFalse, normalize.ReasonNoService)
	_, err = services.Create(ctx, normalizetest.Service("demo", "ghost", nil, nil, corev1.ServiceSpec{ClusterIP: "10.96.0.40"}), metav1.CreateOptions{})
	must(t, err)
	if e := h.nextStatus(t, "demo/ghost"); !e.updated {
		t.Fatalf("check after the ghost's Service appeared: %+v, want a write", e)
	}
	checkValid(t, h.valid(t, "demo", "ghost"), metav1.ConditionTrue, "Valid")
	if n := h.statusWrites(); n != 2 {
		t.Errorf("%d status writes, want 2", n)
	}
}

func TestServiceExportStatusRetries(t *testing.T) {
	var failures atomic.Int32
	failures.Store(2)
	h := start(t, []runtime.Object{
		normalizetest.Namespace("demo", nil),
		normalizetest.Service("demo", "echo", nil, nil, corev1.ServiceSpec{ClusterIP: "10.96.0.10"}),
		normalizetest.Export("demo", "echo"),
	}, func(h *harness) {
		h.mcs.PrependReactor("update", "serviceexports", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() == "status" && failures.Add(-1) >= 0 {
				return true, nil, errors.New("the API server is busy")
			}
			return false, nil, nil
		})
	})
	h.started(t)
	for range 2 {
		if e := h.nextStatus(t, "demo/echo"); e.err == nil {
			t.Fatalf("check %+v, want the injected error", e)
		}
	}
	if e := h.nextStatus(t, "demo/echo"); !e.updated || e.err != nil {
		t.Fatalf("retry %+v, want a write", e)
	}
	checkValid(t, h.valid(t, "demo", "echo"), metav1.ConditionTrue, "Valid")
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
