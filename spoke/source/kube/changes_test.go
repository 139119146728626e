package kube

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

func testHandler(kind normalize.Kind, same func(old, cur any) bool) (handler, *queue, *bytes.Buffer) {
	q := newQueue()
	var logs bytes.Buffer
	return handler{kind: kind, q: q, log: slog.New(slog.NewTextHandler(&logs, nil)), same: same}, q, &logs
}

func sliceOf(namespace, name, svc string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, ResourceVersion: "1"}}
	if svc != "" {
		s.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	return s
}

func withVersion[T any, P interface {
	*T
	metav1.Object
}](o P, rv string, edit func(P),
) P {
	c := new(T)
	*c = *o
	P(c).SetResourceVersion(rv)
	if edit != nil {
		edit(P(c))
	}
	return P(c)
}

func TestHandlerChanges(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", ResourceVersion: "1"}}
	relabelled := withVersion(svc, "2", func(s *corev1.Service) { s.Labels = map[string]string{normalize.LabelExport: "true"} })
	podA := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo-a", ResourceVersion: "1"}}
	notReady := withVersion(podA, "2", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "1"}}
	rezoned := withVersion(node, "2", func(n *corev1.Node) { n.Labels = map[string]string{normalize.LabelZone: "z2"} })
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo", ResourceVersion: "1"}}
	moved := withVersion(ns, "2", func(n *corev1.Namespace) { n.Labels = map[string]string{normalize.LabelNetwork: "n2"} })
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", ResourceVersion: "1"}}
	withStatus := withVersion(se, "2", func(s *mcsv1beta1.ServiceExport) {
		s.Status.Conditions = []metav1.Condition{{Type: "Valid", Status: metav1.ConditionTrue}}
	})
	echoSlice := sliceOf("demo", "echo-abc", "echo")
	scaled := withVersion(echoSlice, "2", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}
	})
	movedSlice := withVersion(echoSlice, "2", func(s *discoveryv1.EndpointSlice) {
		s.Labels = map[string]string{discoveryv1.LabelServiceName: "db"}
	})
	orphaned := withVersion(echoSlice, "2", func(s *discoveryv1.EndpointSlice) { s.Labels = nil })

	change := func(kind normalize.Kind, namespace, name string) []normalize.Change {
		return []normalize.Change{{Kind: kind, Namespace: namespace, Name: name}}
	}
	echoSvc := change(normalize.KindService, "demo", "echo")
	echoSlices := change(normalize.KindEndpointSlice, "demo", "echo")
	tests := []struct {
		name   string
		kind   normalize.Kind
		same   func(old, cur any) bool
		notify func(h handler)
		want   []normalize.Change
	}{
		{"service added", normalize.KindService, unchanged[corev1.Service], func(h handler) { h.OnAdd(svc, false) }, echoSvc},
		{"service relabelled", normalize.KindService, unchanged[corev1.Service], func(h handler) { h.OnUpdate(svc, relabelled) }, echoSvc},
		{"service deleted", normalize.KindService, unchanged[corev1.Service], func(h handler) { h.OnDelete(svc) }, echoSvc},
		{
			"service: only the resourceVersion changed", normalize.KindService, unchanged[corev1.Service],
			func(h handler) { h.OnUpdate(svc, withVersion(svc, "3", nil)) }, nil,
		},
		{"resync", normalize.KindService, unchanged[corev1.Service], func(h handler) { h.OnUpdate(svc, svc) }, nil},
		{"pod not ready", normalize.KindPod, unchanged[corev1.Pod], func(h handler) { h.OnUpdate(podA, notReady) }, change(normalize.KindPod, "demo", "echo-a")},
		{"node relabelled", normalize.KindNode, unchanged[corev1.Node], func(h handler) { h.OnUpdate(node, rezoned) }, change(normalize.KindNode, "", "node-a")},
		{
			"node heartbeat (stripped by the transform)", normalize.KindNode, unchanged[corev1.Node],
			func(h handler) { h.OnUpdate(node, withVersion(node, "9", nil)) }, nil,
		},
		{
			"namespace moved to another network", normalize.KindNamespace, unchanged[corev1.Namespace],
			func(h handler) { h.OnUpdate(ns, moved) }, change(normalize.KindNamespace, "", "demo"),
		},
		{
			"export status set", normalize.KindServiceExport, unchanged[mcsv1beta1.ServiceExport],
			func(h handler) { h.OnUpdate(se, withStatus) }, change(normalize.KindServiceExport, "demo", "echo"),
		},
		{"slice added", normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice], func(h handler) { h.OnAdd(echoSlice, true) }, echoSlices},
		{"slice scaled", normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice], func(h handler) { h.OnUpdate(echoSlice, scaled) }, echoSlices},
		{
			"slice moved to another service", normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice],
			func(h handler) { h.OnUpdate(echoSlice, movedSlice) },
			[]normalize.Change{{Kind: normalize.KindEndpointSlice, Namespace: "demo", Name: "db"}, echoSlices[0]},
		},
		{
			"slice lost its service label", normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice],
			func(h handler) { h.OnUpdate(echoSlice, orphaned) }, echoSlices,
		},
		{
			"slice without a service", normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice],
			func(h handler) { h.OnAdd(sliceOf("demo", "custom", ""), false) }, nil,
		},
		{"slice deleted", normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice], func(h handler) { h.OnDelete(echoSlice) }, echoSlices},
		{
			"slice tombstone", normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice],
			func(h handler) { h.OnDelete(cache.DeletedFinalStateUnknown{Key: "demo/echo-abc", Obj: echoSlice}) }, echoSlices,
		},
		{
			"service tombstone", normalize.KindService, unchanged[corev1.Service],
			func(h handler) { h.OnDelete(cache.DeletedFinalStateUnknown{Key: "demo/echo", Obj: svc}) }, echoSvc,
		},
		{
			"service tombstone without its object", normalize.KindService, unchanged[corev1.Service],
			func(h handler) { h.OnDelete(cache.DeletedFinalStateUnknown{Key: "demo/echo"}) }, echoSvc,
		},
		{
			"node tombstone without its object", normalize.KindNode, unchanged[corev1.Node],
			func(h handler) { h.OnDelete(cache.DeletedFinalStateUnknown{Key: "node-a"}) }, change(normalize.KindNode, "", "node-a"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, q, _ := testHandler(tt.kind, tt.same)
			tt.notify(h)
			got := q.take()
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandlerLogsSliceTombstoneWithoutObject(t *testing.T) {
	h, q, logs := testHandler(normalize.KindEndpointSlice, unchanged[discoveryv1.EndpointSlice])
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "demo/echo-abc"})
	if got := q.take(); len(got) != 0 {
		t.Errorf("changes %v, want none: the key does not name the service", got)
	}
	if !strings.Contains(logs.String(), "deleted object of unknown state") {
		t.Errorf("logs: %s", logs)
	}
}

func TestQueueCoalescesAndSorts(t *testing.T) {
	q := newQueue()
	q.add(normalize.Change{Kind: normalize.KindPod, Namespace: "b", Name: "p"})
	q.add(normalize.Change{Kind: normalize.KindService, Namespace: "b", Name: "s"},
		normalize.Change{Kind: normalize.KindService, Namespace: "a", Name: "s"})
	q.add(normalize.Change{Kind: normalize.KindPod, Namespace: "b", Name: "p"})
	if q.len() != 3 {
		t.Errorf("len() = %d, want 3", q.len())
	}
	want := []normalize.Change{
		{Kind: normalize.KindService, Namespace: "a", Name: "s"},
		{Kind: normalize.KindService, Namespace: "b", Name: "s"},
		{Kind: normalize.KindPod, Namespace: "b", Name: "p"},
	}
	if diff := cmp.Diff(want, q.take()); diff != "" {
		t.Errorf("take() (-want +got):\n%s", diff)
	}
	if got := q.take(); len(got) != 0 {
		t.Errorf("second take() = %v, want nothing", got)
	}
}
