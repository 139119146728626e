package writeback

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/shard/shardtest"
	"github.com/meshfed/meshfed/spoke/source/kube"
)

// mirror is what the hub would hold of a tracker's shard: the endpoints'
// addresses, kept up to date from the tracker's updates.
type mirror struct {
	mu        sync.Mutex
	endpoints map[string]bool // endpoint key → present
}

// pull applies the tracker's pending updates, acknowledging each. It runs
// on the source's goroutine, right after the builder applied a batch.
func (m *mirror) pull(tr trackedShard) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for u := tr.Next("mirror", 0); u != nil; u = tr.Next("mirror", 0) {
		var full federationpb.ShardUpdate
		for _, c := range shardtest.Chunks(u) {
			b, _ := proto.Marshal(c) // a chunk carries its records encoded
			var d federationpb.ShardUpdate
			_ = proto.Unmarshal(b, &d)
			proto.Merge(&full, &d)
		}
		if full.GetFull() {
			m.endpoints = map[string]bool{}
		}
		for _, e := range full.GetEndpoints() {
			m.endpoints[e.GetNamespace()+"/"+e.GetService()+"/"+e.GetAddress()] = true
		}
		for _, k := range full.GetRemovedEndpoints() {
			delete(m.endpoints, k)
		}
		tr.Acked(u.Version())
	}
}

func (m *mirror) addresses() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.endpoints))
}

// TestRejectedObjectsOnAPIServer runs the source against a real API
// server, feeding a shard builder that reports to the write-back.
//
// A real API server refuses most input the spoke cannot use: a Service
// port or targetPort 70000, an endpoint address 999.1.1.1 (or 010.0.0.1,
// fe80::1%eth0, ::ffff:10.0.0.1, 0.0.0.0), an endpoint hostname or a port
// name that is no DNS label, an appProtocol that is no qualified name,
// more than 1000 endpoints in one slice. Those reach the spoke only from
// the file source (spoke/source/file); the tests of spoke/normalize and
// spoke/shard cover them. What it admits and the spoke rejects: an
// EndpointSlice port out of range (70000, 0 and -1: slice ports are not
// range checked), an endpoint zone that is no label value, a targetRef
// whose strings are not UTF-8 (sent as protobuf, which the API server
// stores without checking), a Service with more than 256 ports, a pod IP
// 0.0.0.0. This test uses the first and the third.
func TestRejectedObjectsOnAPIServer(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	ctx := t.Context()
	// Protobuf, so that a string that is not UTF-8 arrives as sent (JSON
	// would replace its bad bytes).
	pc := rest.CopyConfig(c.Config)
	pc.ContentType = runtime.ContentTypeProtobuf
	kc, err := kubernetes.NewForConfig(pc)
	must(t, err)
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = kc.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 8080}}},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Create(ctx,
		&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}}, metav1.CreateOptions{})
	must(t, err)
	sliceClient := kc.DiscoveryV1().EndpointSlices("demo")
	echo1 := echoSlice("echo-1", 8080, "10.1.0.1", "10.1.0.2", "10.1.0.3")
	echo1, err = sliceClient.Create(ctx, echo1, metav1.CreateOptions{})
	must(t, err)

	m := &mirror{endpoints: map[string]bool{}}
	r := run(t, c, func(cfg *rigConfig) { cfg.applied = m.pull })

	valid := func() metav1.Condition {
		se, err := c.MCS.MulticlusterV1alpha1().ServiceExports("demo").Get(ctx, "echo", metav1.GetOptions{})
		must(t, err)
		if c := meta.FindStatusCondition(se.Status.Conditions, "Valid"); c != nil {
			return *c
		}
		return metav1.Condition{}
	}
	eventsOf := func(name string) []corev1.Event {
		list, err := kc.CoreV1().Events("demo").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		must(t, err)
		return list.Items
	}
	first := []string{"demo/echo/10.1.0.1", "demo/echo/10.1.0.2", "demo/echo/10.1.0.3"}
	testwait.For(t, "the first shard", func() bool { return slices.Equal(m.addresses(), first) })
	testwait.For(t, "the export Valid", func() bool { return valid().Status == metav1.ConditionTrue })

	// A slice port out of range, with an endpoint fewer: the slice keeps
	// its last good version, as a whole.
	bad := echo1.DeepCopy()
	bad.Ports[0].Port = ptr.To[int32](70000)
	bad.Endpoints = bad.Endpoints[:2]
	bad, err = sliceClient.Update(ctx, bad, metav1.UpdateOptions{})
	must(t, err)
	testwait.For(t, "the Event on the bad slice", func() bool { return len(eventsOf("echo-1")) == 1 })
	ev := eventsOf("echo-1")[0]
	if ev.Type != corev1.EventTypeWarning || ev.Reason != "MeshfedRejected" || ev.InvolvedObject.UID != bad.UID ||
		ev.InvolvedObject.Kind != "EndpointSlice" || ev.InvolvedObject.APIVersion != "discovery.k8s.io/v1" ||
		!strings.Contains(ev.Message, `ports[0].port "70000"`) || !strings.Contains(ev.Message, "last good version stays federated") {
		t.Errorf("Event %+v", ev)
	}
	testwait.For(t, "the export not Valid", func() bool { return valid().Reason == normalize.ReasonRejected })
	if c := valid(); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "EndpointSlice demo/echo-1: ports[0].port") {
		t.Errorf("Valid condition %+v", c)
	}
	if got := m.addresses(); !slices.Equal(got, first) {
		t.Errorf("endpoints %v, want the last good slice's %v", got, first)
	}

	// Still bad, changed otherwise: no second Event. Then a new slice whose
	// targetRef is not UTF-8 is left out, with an Event of its own; the
	// source's one worker has handled echo-1's change by then.
	bad.Endpoints[0].Conditions.Ready = ptr.To(false)
	_, err = sliceClient.Update(ctx, bad, metav1.UpdateOptions{})
	must(t, err)
	echo2 := echoSlice("echo-2", 8080, "10.1.0.9")
	echo2.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "pod-\xff"}
	_, err = sliceClient.Create(ctx, echo2, metav1.CreateOptions{})
	must(t, err)
	testwait.For(t, "the Event on the new bad slice", func() bool { return len(eventsOf("echo-2")) == 1 })
	if ev := eventsOf("echo-2")[0]; !strings.Contains(ev.Message, "targetRef.name") || !strings.Contains(ev.Message, "it is not federated") {
		t.Errorf("Event %+v", ev)
	}
	if n := len(eventsOf("echo-1")); n != 1 {
		t.Errorf("%d Events on echo-1, want 1: its rejection did not change", n)
	}
	if got := m.addresses(); !slices.Equal(got, first) {
		t.Errorf("endpoints %v, want the last good slice's %v and not the new bad one", got, first)
	}
	if c := valid(); !strings.Contains(c.Message, "and 1 more rejected object") {
		t.Errorf("Valid condition %+v, want it to count both slices", c)
	}

	// Fixed and deleted: the new version replaces the last good one, and
	// the export is Valid again.
	fixed := echoSlice("echo-1", 8080, "10.1.0.1", "10.1.0.2")
	cur, err := sliceClient.Get(ctx, "echo-1", metav1.GetOptions{})
	must(t, err)
	fixed.ResourceVersion = cur.ResourceVersion
	_, err = sliceClient.Update(ctx, fixed, metav1.UpdateOptions{})
	must(t, err)
	must(t, sliceClient.Delete(ctx, "echo-2", metav1.DeleteOptions{}))
	testwait.For(t, "the fixed shard", func() bool { return strings.Join(m.addresses(), ",") == "demo/echo/10.1.0.1,demo/echo/10.1.0.2" })
	testwait.For(t, "the export Valid again", func() bool { return valid().Status == metav1.ConditionTrue })
	n := 0
	r.events.Range(func(any, any) bool { n++; return true })
	if n != 2 {
		t.Errorf("%d Events written, want 2", n)
	}
}

func echoSlice(name string, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// TestRejectionsDue: one Event per object and rejection until it changes;
// an object rejected again after it was good is due another.
func TestRejectionsDue(t *testing.T) {
	src := New(kube.New(kube.API{}, kube.Config{}, nil), API{}, Config{}, nil) // a source never run: empty caches
	rs := src.rejections
	ref := objectRef{normalize.KindEndpointSlice, "demo", "echo-1"}
	r := normalize.Rejection{
		Kind: normalize.KindEndpointSlice, Namespace: "demo", Name: "echo-1", Service: "demo/echo",
		Field: "ports[0].port", Value: "70000", Reason: normalize.RejectInvalidPort, Message: "out of range",
	}
	due := func() bool { _, ok := rs.due(ref); return ok }
	send := func() {
		got, ok := rs.due(ref)
		if !ok {
			t.Fatal("no Event due")
		}
		rs.sent(ref, got)
	}
	src.Rejected(r, true)
	send()
	src.Rejected(r, true)
	if due() {
		t.Error("an Event is due again for the same rejection")
	}
	if st, ok := rs.validStatus("demo/echo"); !ok || st.Reason != normalize.ReasonRejected ||
		st.Message != `EndpointSlice demo/echo-1: ports[0].port "70000": out of range; its last good version stays federated` {
		t.Errorf("validStatus = %+v, %v", st, ok)
	}
	src.Rejected(r, false) // its last good version can no longer stand in
	send()
	src.Accepted(r.Kind, r.Namespace, r.Name)
	if due() {
		t.Error("an Event is due for an accepted object")
	}
	if _, ok := rs.validStatus("demo/echo"); ok {
		t.Error("an accepted object still makes its service invalid")
	}
	src.Rejected(r, false)
	if !due() {
		t.Error("no Event due for an object rejected again")
	}
}
