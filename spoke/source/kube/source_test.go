package kube

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/meshfed/meshfed/internal/testlog"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/normalize/normalizetest"
	"github.com/meshfed/meshfed/spoke/shard"
)

// waitTimeout bounds every wait; it only matters when a test fails.
const waitTimeout = 20 * time.Second

// mcsClient is mcs-api's fake clientset, which predates client-go's
// watch-list opt-out: without it, informers wait for a bookmark the fake
// never sends.
type mcsClient struct{ *mcsfake.Clientset }

func (mcsClient) IsWatchListSemanticsUnSupported() bool { return true }

// fakeAPI is the API over fake clientsets; a nil mcs serves no MCS kinds.
func fakeAPI(kube *kubefake.Clientset, mcs *mcsfake.Clientset) API {
	api := API{
		Services:       fakeListWatch(kube, kube.CoreV1().Services("").List, kube.CoreV1().Services("").Watch),
		EndpointSlices: fakeListWatch(kube, kube.DiscoveryV1().EndpointSlices("").List, kube.DiscoveryV1().EndpointSlices("").Watch),
		Pods:           fakeListWatch(kube, kube.CoreV1().Pods("").List, kube.CoreV1().Pods("").Watch),
		Nodes:          fakeListWatch(kube, kube.CoreV1().Nodes().List, kube.CoreV1().Nodes().Watch),
		Namespaces:     fakeListWatch(kube, kube.CoreV1().Namespaces().List, kube.CoreV1().Namespaces().Watch),
	}
	if mcs != nil {
		api.MCS = fakeMCS{mcs}
	}
	return api
}

func fakeListWatch[L runtime.Object](client any, list func(context.Context, metav1.ListOptions) (L, error), watch func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) },
		WatchFuncWithContext: watch,
	}, client)
}

// fakeMCS is MCSAPI over mcs-api's fake clientset, v1beta1 only; its
// discovery serves what the clientset's Resources list.
type fakeMCS struct{ mcs *mcsfake.Clientset }

func (m fakeMCS) Served(context.Context) (MCSVersions, error) {
	var v MCSVersions
	resources, err := m.mcs.Discovery().ServerResourcesForGroupVersion(mcsv1beta1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return v, nil
	}
	if err != nil {
		return v, err
	}
	if lists(resources, mcsv1beta1.ServiceExportPluralName) {
		v.Exports = mcsv1beta1.GroupVersion.Version
	}
	return v, nil
}

func (m fakeMCS) Exports(string) cache.ListerWatcher {
	exports := m.mcs.MulticlusterV1beta1().ServiceExports("")
	return fakeListWatch(mcsClient{m.mcs}, exports.List, exports.Watch)
}

type update struct {
	in      normalize.Inputs
	changes []normalize.Change
}

type harness struct {
	kube    *kubefake.Clientset
	mcs     *mcsfake.Clientset
	src     *Source
	tracker trackedShard
	updates chan update
	watches chan string // resources whose watch started
	logs    *testlog.Buffer
}

type harnessOption func(*harness)

func withClock(clk *clocktesting.FakeClock) harnessOption {
	return func(h *harness) { h.src.clock = clk }
}

// withoutServiceExports makes discovery say the cluster has no MCS CRDs.
func withoutServiceExports(h *harness) { h.mcs.Resources = nil }

// start runs a source over fake clientsets holding objs, feeding a real
// shard builder, until the test ends.
func start(t *testing.T, objs []runtime.Object, opts ...harnessOption) *harness {
	t.Helper()
	var kubeObjs, mcsObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*mcsv1beta1.ServiceExport); ok {
			mcsObjs = append(mcsObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	h := &harness{
		kube:    kubefake.NewClientset(kubeObjs...),
		mcs:     mcsfake.NewSimpleClientset(mcsObjs...),
		tracker: newTrackedShard(),
		updates: make(chan update, 1000), // tests that look at some changes only need not read them
		watches: make(chan string, 100),
		logs:    &testlog.Buffer{},
	}
	h.mcs.Resources = []*metav1.APIResourceList{{
		GroupVersion: mcsv1beta1.GroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "serviceexports", Namespaced: true, Kind: "ServiceExport"}},
	}}
	// Tell the test when each watch has started: the fakes drop what
	// happens between an informer's list and its watch.
	for _, f := range []*clienttesting.Fake{&h.kube.Fake, &h.mcs.Fake} {
		tracker := h.kube.Tracker()
		if f == &h.mcs.Fake {
			tracker = h.mcs.Tracker()
		}
		f.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
			w, err := tracker.Watch(action.GetResource(), action.GetNamespace())
			h.watches <- action.GetResource().Resource
			return true, w, err
		})
	}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.src = New(fakeAPI(h.kube, h.mcs), Config{Options: normalizetest.Options}, log)
	for _, o := range opts {
		o(h)
	}
	builder := shard.NewBuilder(normalizetest.Options, h.tracker.Tracker, log.With("component", "builder"))

	ctx, cancel := context.WithCancel(context.Background())
	resyncs := make(chan error, 1)
	go func() { resyncs <- builder.Run(ctx) }()
	done := make(chan error, 1)
	go func() {
		done <- h.src.Run(ctx, func(in normalize.Inputs, changes []normalize.Change) {
			builder.Apply(in, changes)
			select {
			case h.updates <- update{in, changes}:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil after cancel", err)
		}
		if err := <-resyncs; err != nil {
			t.Errorf("builder's Run() = %v, want nil after cancel", err)
		}
	})
	return h
}

func (h *harness) next(t *testing.T) update {
	t.Helper()
	select {
	case u := <-h.updates:
		return u
	case <-time.After(waitTimeout):
		t.Fatalf("no update within %v; logs:\n%s", waitTimeout, h.logs)
		return update{}
	}
}

// waitWatches waits until the informers of n kinds are watching.
func (h *harness) waitWatches(t *testing.T, n int) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case r := <-h.watches:
			seen[r] = true
		case <-time.After(waitTimeout):
			t.Fatalf("watching %v after %v, want %d kinds; logs:\n%s", seen, waitTimeout, n, h.logs)
		}
	}
}

// started waits for the initial update and the watches.
func (h *harness) started(t *testing.T) update {
	t.Helper()
	u := h.next(t)
	kinds := 6
	if h.mcs.Resources == nil {
		kinds = 5
	}
	h.waitWatches(t, kinds)
	return u
}

// waitChanges waits until the updates have reported every change of want,
// and returns every change they reported.
func (h *harness) waitChanges(t *testing.T, want ...normalize.Change) map[normalize.Change]bool {
	t.Helper()
	seen := map[normalize.Change]bool{}
	missing := func() []normalize.Change {
		var out []normalize.Change
		for _, c := range want {
			if !seen[c] {
				out = append(out, c)
			}
		}
		return out
	}
	deadline := time.After(waitTimeout)
	for len(missing()) > 0 {
		select {
		case u := <-h.updates:
			for _, c := range u.changes {
				seen[c] = true
			}
		case <-deadline:
			t.Fatalf("changes %v not reported; saw %v; logs:\n%s", missing(), seen, h.logs)
		}
	}
	return seen
}

// objects returns what the fake API servers hold.
func (h *harness) objects(t *testing.T) []runtime.Object {
	t.Helper()
	ctx := t.Context()
	var out []runtime.Object
	add := func(list runtime.Object, err error) {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		out = append(out, items...)
	}
	core := h.kube.CoreV1()
	add(core.Services("").List(ctx, metav1.ListOptions{}))
	add(core.Pods("").List(ctx, metav1.ListOptions{}))
	add(core.Nodes().List(ctx, metav1.ListOptions{}))
	add(core.Namespaces().List(ctx, metav1.ListOptions{}))
	add(h.kube.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}))
	add(h.mcs.MulticlusterV1beta1().ServiceExports("").List(ctx, metav1.ListOptions{}))
	return out
}

// converge waits until the tracker holds the shard of the fake API
// servers' objects, built from scratch.
func (h *harness) converge(t *testing.T) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		want := fullShard(t, normalizetest.InputsOf(h.objects(t)), normalizetest.Options)
		h.tracker.Reconnected(false, 0)
		got := sortedFull(t, h.tracker)
		diff := cmp.Diff(want, got, protocmp.Transform())
		if diff == "" {
			return
		}
		select {
		case <-h.updates:
		case <-deadline:
			t.Fatalf("the shard did not converge (-want +got):\n%s\nlogs:\n%s", diff, h.logs)
		}
	}
}

// everyObject returns the change each object means on its own.
func everyObject(objs []runtime.Object) []normalize.Change {
	q := newQueue()
	for _, o := range objs {
		m := o.(metav1.Object)
		switch o.(type) {
		case *corev1.Service:
			q.add(normalize.Change{Kind: normalize.KindService, Namespace: m.GetNamespace(), Name: m.GetName()})
		case *mcsv1beta1.ServiceExport:
			q.add(normalize.Change{Kind: normalize.KindServiceExport, Namespace: m.GetNamespace(), Name: m.GetName()})
		case *corev1.Pod:
			q.add(normalize.Change{Kind: normalize.KindPod, Namespace: m.GetNamespace(), Name: m.GetName()})
		case *corev1.Node:
			q.add(normalize.Change{Kind: normalize.KindNode, Name: m.GetName()})
		case *corev1.Namespace:
			q.add(normalize.Change{Kind: normalize.KindNamespace, Name: m.GetName()})
		case *discoveryv1.EndpointSlice:
			q.add(normalize.Change{Kind: normalize.KindEndpointSlice, Namespace: m.GetNamespace(), Name: m.GetLabels()[discoveryv1.LabelServiceName]})
		}
	}
	return q.take()
}

func TestInitialSync(t *testing.T) {
	objs := normalizetest.Cluster()
	h := start(t, objs)
	u := h.started(t)
	if diff := cmp.Diff(everyObject(objs), u.changes); diff != "" {
		t.Errorf("initial changes (-want +got):\n%s", diff)
	}
	want := fullShard(t, normalizetest.InputsOf(objs), normalizetest.Options)
	if diff := cmp.Diff(want, sortedFull(t, h.tracker), protocmp.Transform()); diff != "" {
		t.Errorf("initial shard (-want +got):\n%s", diff)
	}
	checkFixtureShard(t, want)
}

func TestFollowsChanges(t *testing.T) {
	h := start(t, normalizetest.Cluster())
	h.started(t)
	h.converge(t)
	ctx := t.Context()
	core, slices, exports := h.kube.CoreV1(), h.kube.DiscoveryV1(), h.mcs.MulticlusterV1beta1()

	getSvc := func(ns, name string) *corev1.Service {
		s, err := core.Services(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		return s
	}
	getPod := func(ns, name string) *corev1.Pod {
		p, err := core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		return p
	}
	getSlice := func(ns, name string) *discoveryv1.EndpointSlice {
		s, err := slices.EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		return s
	}
	change := func(kind normalize.Kind, ns, name string) normalize.Change {
		return normalize.Change{Kind: kind, Namespace: ns, Name: name}
	}

	steps := []struct {
		name string
		do   func()
		want []normalize.Change
	}{
		{"export by label", func() {
			s := getSvc("demo", "db")
			s.Labels[normalize.LabelExport] = "true"
			_, err := core.Services("demo").Update(ctx, s, metav1.UpdateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindService, "demo", "db")}},
		{"unexport: delete the ServiceExport", func() {
			must(t, exports.ServiceExports("demo").Delete(ctx, "echo", metav1.DeleteOptions{}))
		}, []normalize.Change{change(normalize.KindServiceExport, "demo", "echo")}},
		{"export again", func() {
			_, err := exports.ServiceExports("demo").Create(ctx, normalizetest.Export("demo", "echo"), metav1.CreateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindServiceExport, "demo", "echo")}},
		{"a pod turns not ready", func() {
			p := getPod("demo", "echo-a")
			p.Status.Conditions[2].Status = corev1.ConditionFalse
			_, err := core.Pods("demo").UpdateStatus(ctx, p, metav1.UpdateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindPod, "demo", "echo-a")}},
		{"a node relabelled to another zone", func() {
			n, err := core.Nodes().Get(ctx, "node-b", metav1.GetOptions{})
			must(t, err)
			n.Labels[normalize.LabelZone] = "us-east1-c"
			_, err = core.Nodes().Update(ctx, n, metav1.UpdateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindNode, "", "node-b")}},
		{"an EndpointSlice split in two", func() {
			s := getSlice("demo", "echo-v4")
			second := s.DeepCopy()
			second.Name, second.UID, second.ResourceVersion = "echo-v4-2", "uid-echo-v4-2", ""
			second.Endpoints = s.Endpoints[2:]
			s.Endpoints = s.Endpoints[:2]
			_, err := slices.EndpointSlices("demo").Create(ctx, second, metav1.CreateOptions{})
			must(t, err)
			_, err = slices.EndpointSlices("demo").Update(ctx, s, metav1.UpdateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindEndpointSlice, "demo", "echo")}},
		{"an EndpointSlice moved to another service", func() {
			s := getSlice("demo", "echo-v4-2")
			s.Labels[discoveryv1.LabelServiceName] = "db"
			_, err := slices.EndpointSlices("demo").Update(ctx, s, metav1.UpdateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindEndpointSlice, "demo", "db"), change(normalize.KindEndpointSlice, "demo", "echo")}},
		{"a namespace moved to another network", func() {
			ns, err := core.Namespaces().Get(ctx, "demo", metav1.GetOptions{})
			must(t, err)
			ns.Labels[normalize.LabelNetwork] = "net-demo"
			_, err = core.Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindNamespace, "", "demo")}},
		{"the gateway loses an address", func() {
			s := getSvc("istio-system", "eastwest")
			s.Spec.ExternalIPs = nil
			_, err := core.Services("istio-system").Update(ctx, s, metav1.UpdateOptions{})
			must(t, err)
		}, []normalize.Change{change(normalize.KindService, "istio-system", "eastwest")}},
		{"a service deleted", func() {
			must(t, core.Services("edge").Delete(ctx, "cache", metav1.DeleteOptions{}))
		}, []normalize.Change{change(normalize.KindService, "edge", "cache")}},
		{"a pod deleted", func() {
			must(t, core.Pods("demo").Delete(ctx, "echo-c", metav1.DeleteOptions{}))
		}, []normalize.Change{change(normalize.KindPod, "demo", "echo-c")}},
	}
	for _, step := range steps {
		step.do()
		h.waitChanges(t, step.want...)
		h.converge(t)
		if t.Failed() {
			t.Fatalf("after %q", step.name)
		}
	}
}

func TestIgnoresWhatTheCacheDoesNotKeep(t *testing.T) {
	h := start(t, normalizetest.Cluster())
	h.started(t)
	ctx := t.Context()
	pods := h.kube.CoreV1().Pods("demo")

	// A container restart, then a label change of another pod: the pod
	// informer notifies in order, so when the second is reported, the
	// first has been handled.
	p, err := pods.Get(ctx, "echo-b", metav1.GetOptions{})
	must(t, err)
	p.Status.ContainerStatuses[0].RestartCount++
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must(t, err)
	p, err = pods.Get(ctx, "echo-c", metav1.GetOptions{})
	must(t, err)
	p.Labels["version"] = "v9"
	_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	must(t, err)

	seen := h.waitChanges(t, normalize.Change{Kind: normalize.KindPod, Namespace: "demo", Name: "echo-c"})
	if seen[normalize.Change{Kind: normalize.KindPod, Namespace: "demo", Name: "echo-b"}] {
		t.Errorf("a container status change was reported: %v", seen)
	}
}

func TestBatching(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	h := start(t, []runtime.Object{normalizetest.Namespace("demo", nil)}, withClock(clk))
	h.started(t)
	ctx := t.Context()
	services := h.kube.CoreV1().Services("demo")
	create := func(name string) {
		_, err := services.Create(ctx, normalizetest.Service("demo", name, nil, nil, corev1.ServiceSpec{}), metav1.CreateOptions{})
		must(t, err)
	}
	svc := func(name string) normalize.Change {
		return normalize.Change{Kind: normalize.KindService, Namespace: "demo", Name: name}
	}

	// After a quiet period, a change leaves at once: the clock stands still.
	clk.Step(DefaultBatchWindow)
	create("first")
	if diff := cmp.Diff([]normalize.Change{svc("first")}, h.next(t).changes); diff != "" {
		t.Errorf("lone change (-want +got):\n%s", diff)
	}

	// A burst within the window waits for it, and leaves as one call.
	var want []normalize.Change
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		create(name)
		want = append(want, svc(name))
	}
	testwait.For(t, "the burst is queued and the loop waits for the window", func() bool {
		return h.src.queue.len() == len(want) && clk.HasWaiters()
	})
	select {
	case u := <-h.updates:
		t.Fatalf("delivered before the window ended: %v", u.changes)
	default:
	}
	clk.Step(DefaultBatchWindow)
	if diff := cmp.Diff(want, h.next(t).changes); diff != "" {
		t.Errorf("burst (-want +got):\n%s", diff)
	}
}

func TestWithoutServiceExportCRD(t *testing.T) {
	objs := normalizetest.Cluster()
	h := start(t, objs, withoutServiceExports)
	h.started(t)
	// The label still exports edge/cache; demo/echo's export is unseen.
	u := sortedFull(t, h.tracker)
	if len(u.Services) != 1 || u.Services[0].GetName() != "cache" {
		t.Errorf("services %v, want edge/cache only", u.Services)
	}
	for _, a := range h.mcs.Actions() {
		if a.GetResource().Resource != "resource" { // discovery
			t.Errorf("MCS API called without the CRD: %v", a)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, w := range []time.Duration{-time.Millisecond, 101 * time.Millisecond} {
		err := Config{BatchWindow: w}.Validate()
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("BatchWindow %v: Validate() = %v, want ErrInvalidConfig", w, err)
		}
	}
	if err := (Config{}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	src := New(fakeAPI(kubefake.NewClientset(), nil), Config{BatchWindow: time.Second}, nil)
	if err := src.Run(t.Context(), func(normalize.Inputs, []normalize.Change) {}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Run() with an invalid config = %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
