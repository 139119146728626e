package kubeview

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshfed/meshfed/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func pod(ns, name, ip string, phase corev1.PodPhase, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec:       corev1.PodSpec{ServiceAccountName: "echo", NodeName: "node-1"},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func replace(t *testing.T, v *View, r Resource, objs ...Object) {
	t.Helper()
	if err := v.Replace(r, objs); err != nil {
		t.Fatal(err)
	}
}

// serve runs v on a loopback HTTP server and returns a client config of it.
func serve(t *testing.T, v *View) *rest.Config {
	t.Helper()
	cfg, _ := serveLogged(t, v)
	return cfg
}

// serveLogged is serve, and tells the queries of the requests so far.
func serveLogged(t *testing.T, v *View) (*rest.Config, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		v.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return &rest.Config{Host: srv.URL, QPS: -1}, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(queries)
	}
}

// TestInformersFollowTheView: client-go's informers (a streaming list,
// then a watch) hold a View's objects, with istiod's field selector on
// pods, and follow every change; CRDs read as metadata.
func TestInformersFollowTheView(t *testing.T) {
	v := New()
	replace(t, v, Pods,
		pod("demo", "echo-a", "10.2.0.1", corev1.PodRunning, map[string]string{"app": "echo"}),
		pod("demo", "echo-b", "10.2.0.2", corev1.PodRunning, map[string]string{"app": "echo"}),
		pod("demo", "echo-failed", "10.2.0.3", corev1.PodFailed, map[string]string{"app": "echo"}))
	replace(t, v, CustomResourceDefinitions, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "gateways.gateway.networking.k8s.io"}})
	cfg, queries := serveLogged(t, v)

	factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cfg), 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "status.phase!=Failed" }))
	pods := factory.Core().V1().Pods()
	podInformer := pods.Informer()
	meta := metadatainformer.NewSharedInformerFactory(metadata.NewForConfigOrDie(cfg), 0)
	crds := meta.ForResource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crdInformer := crds.Informer()
	stop := make(chan struct{})
	defer func() {
		close(stop)
		factory.Shutdown()
		meta.Shutdown()
	}()
	factory.Start(stop)
	meta.Start(stop)
	if !cache.WaitForCacheSync(t.Context().Done(), podInformer.HasSynced, crdInformer.HasSynced) {
		t.Fatal("the informers did not sync")
	}
	names := func() []string {
		var out []string
		for _, p := range podInformer.GetStore().List() {
			p := p.(*corev1.Pod)
			out = append(out, p.Name+"="+p.Status.PodIP)
		}
		slices.Sort(out)
		return out
	}
	if !slices.ContainsFunc(queries(), func(q string) bool {
		return strings.HasPrefix(q, "/api/v1/pods?") && strings.Contains(q, "sendInitialEvents=true")
	}) {
		t.Errorf("the pod informer did not list by a streaming watch: %q", queries())
	}
	if got := names(); !slices.Equal(got, []string{"echo-a=10.2.0.1", "echo-b=10.2.0.2"}) {
		t.Errorf("synced pods %v, want echo-a and echo-b (not the failed one)", got)
	}
	if keys := crdInformer.GetStore().ListKeys(); !slices.Equal(keys, []string{"gateways.gateway.networking.k8s.io"}) {
		t.Errorf("CRDs %v", keys)
	}

	// echo-a moves, echo-b goes, echo-c comes, echo-failed stays failed.
	replace(t, v, Pods,
		pod("demo", "echo-a", "10.2.0.9", corev1.PodRunning, map[string]string{"app": "echo"}),
		pod("demo", "echo-c", "10.2.0.4", corev1.PodRunning, map[string]string{"app": "echo"}),
		pod("demo", "echo-failed", "10.2.0.3", corev1.PodFailed, map[string]string{"app": "echo"}))
	want := []string{"echo-a=10.2.0.9", "echo-c=10.2.0.4"}
	testwait.ForState(t, "the informer follows the view", func() (bool, string) {
		got := names()
		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

// TestWatchResumes: a watch from a list's resourceVersion gets every
// change after it, in order; one from before the events a View still
// holds ends with 410 Expired.
func TestWatchResumes(t *testing.T) {
	v := New()
	replace(t, v, Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}})
	c := kubernetes.NewForConfigOrDie(serve(t, v))
	list, err := c.CoreV1().Services("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].ResourceVersion == "" {
		t.Fatalf("listed %+v", list.Items)
	}
	// Unchanged content: no new version, no event.
	replace(t, v, Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"}})
	replace(t, v, Services,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", Labels: map[string]string{"istio.io/global": "true"}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db"}})
	replace(t, v, Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db"}})

	w, err := c.CoreV1().Services("").Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for len(got) < 3 {
		ev := <-w.ResultChan()
		s := ev.Object.(*corev1.Service)
		got = append(got, fmt.Sprintf("%s %s/%s %s", ev.Type, s.Namespace, s.Name, s.Labels["istio.io/global"]))
	}
	want := []string{"MODIFIED demo/echo true", "ADDED other/db ", "DELETED demo/echo true"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}

	// A namespace's watch sees its namespace only.
	nsWatch, err := c.CoreV1().Services("other").Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer nsWatch.Stop()
	if ev := <-nsWatch.ResultChan(); ev.Type != watch.Added || ev.Object.(*corev1.Service).Name != "db" {
		t.Errorf("the namespace's first event: %s %+v", ev.Type, ev.Object)
	}

	for i := range HistoryLimit + 1 {
		replace(t, v, Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db", Labels: map[string]string{"n": fmt.Sprint(i)}}})
	}
	old, err := c.CoreV1().Services("").Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Stop()
	ev := <-old.ResultChan()
	if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired {
		t.Errorf("a watch from before the history: %s %+v, want 410 Expired", ev.Type, ev.Object)
	}
}

// TestSelectorsInWatch: an object that stops matching a watch's label
// selector is deleted for it; one that starts is added.
func TestSelectorsInWatch(t *testing.T) {
	v := New()
	slice := func(svc string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, AddressType: discoveryv1.AddressTypeIPv4}
	}
	replace(t, v, EndpointSlices, slice("echo"))
	c := kubernetes.NewForConfigOrDie(serve(t, v))
	w, err := c.DiscoveryV1().EndpointSlices("demo").Watch(t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=echo"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("first event %s, want the current slice ADDED", ev.Type)
	}
	replace(t, v, EndpointSlices, slice("other"))
	replace(t, v, EndpointSlices, slice("echo"))
	var got []watch.EventType
	for len(got) < 2 {
		got = append(got, (<-w.ResultChan()).Type)
	}
	if !slices.Equal(got, []watch.EventType{watch.Deleted, watch.Added}) {
		t.Errorf("events %v, want DELETED then ADDED", got)
	}
}

// TestRefusals: the View is read-only, serves only its resources, and
// says what is wrong with a request it cannot answer.
func TestRefusals(t *testing.T) {
	v := New()
	cfg := serve(t, v)
	for _, tc := range []struct {
		method, path string
		code         int
		says         string
	}{
		{"POST", "/api/v1/namespaces/demo/pods", http.StatusMethodNotAllowed, "read-only"},
		{"DELETE", "/api/v1/namespaces/demo/pods/echo", http.StatusMethodNotAllowed, "read-only"},
		{"GET", "/api/v1/deployments", http.StatusNotFound, "could not find"},
		{"GET", "/apis/apps/v1/deployments", http.StatusNotFound, "could not find"},
		{"GET", "/api/v1/namespaces/demo/nodes", http.StatusNotFound, "could not find"},
		{"GET", "/api/v1/pods?fieldSelector=spec.schedulerName%3Dx", http.StatusBadRequest, "field label not supported: spec.schedulerName"},
		{"GET", "/api/v1/pods?labelSelector=a%3D%3D%3D", http.StatusBadRequest, "labelSelector"},
		{"GET", "/api/v1/pods?watch=true&sendInitialEvents=true", http.StatusBadRequest, "resourceVersionMatch=NotOlderThan"},
		{"GET", "/api/v1/pods?resourceVersion=abc", http.StatusBadRequest, "resourceVersion"},
		{"GET", "/api/v1/namespaces/demo/pods/none", http.StatusNotFound, "not found"},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, cfg.Host+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tc.method, tc.path, resp.StatusCode, body, tc.code, tc.says)
		}
	}
	for _, tc := range []struct {
		r    Resource
		objs []Object
		says string
	}{
		{Pods, []Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}, "namespaced"},
		{Nodes, []Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "a"}}}, "namespaced"},
		{Nodes, []Object{&corev1.Node{}}, "without a name"},
		{Nodes, []Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}, "given twice"},
	} {
		if err := v.Replace(tc.r, tc.objs); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Replace(%s): %v, want an error saying %q", tc.r.Resource, err, tc.says)
		}
	}
}

// TestDiscovery: kubectl finds the View's resources.
func TestDiscovery(t *testing.T) {
	c := kubernetes.NewForConfigOrDie(serve(t, New()))
	_, lists, err := c.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			got = append(got, l.GroupVersion+"/"+r.Name)
		}
	}
	slices.Sort(got)
	var want []string
	for _, r := range Resources {
		want = append(want, r.GV.String()+"/"+r.Resource)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("discovered %v, want %v", got, want)
	}
}

// BenchmarkReplace: a resource of 1,000 pods given again with one pod
// changed, as a view is updated on every set of imports.
func BenchmarkReplace(b *testing.B) {
	objs := make([]Object, 1000)
	for i := range objs {
		objs[i] = pod("demo", fmt.Sprintf("echo-%d", i), fmt.Sprintf("10.2.%d.%d", i/256, i%256), corev1.PodRunning, map[string]string{"app": "echo"})
	}
	v := New()
	if err := v.Replace(Pods, objs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		objs[0] = pod("demo", "echo-0", fmt.Sprintf("10.3.%d.%d", i/256%256, i%256), corev1.PodRunning, map[string]string{"app": "echo"})
		if err := v.Replace(Pods, objs); err != nil {
			b.Fatal(err)
		}
	}
}
