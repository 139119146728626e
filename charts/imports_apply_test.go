package charts_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/kubeclient"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/source/kube"
	"github.com/meshfed/meshfed/spoke/writeback"
)

// The grants the import writer needs are exercised by the spoke's
// Kubernetes source itself, in process, with the ServiceAccount's token
// and a store fed sets directly, as a hub replica would feed it: the test
// chooses the sets, so that the writer must create, update and delete
// each kind (a hub's first set would only create). TestKubeImportsWrittenBack
// (e2e) runs the whole way, hub included.

// importWriteGrant tells the grants only the import writer's writes need
// (its lists and watches run in every spoke, and the spoke binary shows
// them).
func importWriteGrant(g grant) bool {
	switch {
	case g.group == "multicluster.x-k8s.io" && (g.resource == "serviceimports" || g.resource == "serviceimports/status"):
		return g.verb != "list" && g.verb != "watch"
	case g.group == "discovery.k8s.io" && g.resource == "endpointslices":
		return g.verb != "list" && g.verb != "watch"
	}
	return false
}

// runImportWriter runs the kube source with an imports store until the
// returned function is called, as the client of rc, logging JSON to log.
func runImportWriter(t *testing.T, rc *rest.Config, clusterID, log string, set ...*federationpb.Import) func() {
	t.Helper()
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	store := imports.NewStore()
	link := store.Link("hub-test")
	link.Start()
	link.Received(&federationpb.Imports{Full: true, Imports: set})
	logger := slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clients, err := kubeclient.New(rc, kubeclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := normalize.Options{ClusterID: clusterID, Network: "n1"}
	src := kube.New(kube.NewAPI(clients), kube.Config{Options: opts, DiscoverImports: true}, logger)
	wb := writeback.New(src, writeback.NewAPI(clients), writeback.Config{Options: opts, Imports: store}, logger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() {
		done <- src.Run(ctx, func(_ normalize.Inputs, changes []normalize.Change) { wb.Changed(changes) })
	}()
	go func() { done <- wb.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("source or write-back: %v", err)
			}
		}
		_ = f.Close()
	}
	t.Cleanup(stop)
	return stop
}

// writerImport is an import of service name in ns, whose every field
// rev changes, with an endpoint whose address rev changes.
func writerImport(ns, name string, rev int) *federationpb.Import {
	return &federationpb.Import{
		Namespace: ns, Name: name, Type: federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP, Mcs: true,
		Ports:    []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: uint32(8080 + rev)}},
		Ips:      []string{"10.96.200." + string(rune('1'+rev))},
		Clusters: []string{"west", []string{"north", "south"}[rev]},
		Sources: []*federationpb.ImportSource{{Cluster: "west", Endpoints: []*federationpb.Endpoint{{
			Address: "10.9.0." + string(rune('1'+rev)), Ready: true, Serving: true,
			Ports: []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
		}}}},
	}
}

// exerciseImportWriter has the import writer create, update and delete
// ServiceImports, their status and EndpointSlices in namespace ns with
// sa's token: an administrator's writer first writes one set (echo, gone),
// then sa's writes the next (echo changed, gone removed, fresh added).
// It returns the writer's log: without a grant it needs, the API server
// refuses the request, and the log says so.
func exerciseImportWriter(t *testing.T, api *apiServer, sa *serviceAccount, ns string) *spokeProcess {
	t.Helper()
	api.createNamespace(t, ns)
	p := &spokeProcess{log: filepath.Join(t.TempDir(), "writer.log"), done: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the writer's log:\n%s", p.tail())
		}
	})
	admin := runImportWriter(t, api.Config, "east-admin", p.log, writerImport(ns, "echo", 0), writerImport(ns, "gone", 0))
	poll(t, "the administrator's writer's imports", func() bool {
		si, err := api.MCS.MulticlusterV1beta1().ServiceImports(ns).Get(t.Context(), "gone", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		slices, err := api.Client.DiscoveryV1().EndpointSlices(ns).List(t.Context(), metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return len(si.Status.Clusters) == 2 && len(slices.Items) == 2
	}, nil)
	admin()
	rc, err := clientcmd.BuildConfigFromFlags("", sa.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	runImportWriter(t, rc, "east-sa", p.log, writerImport(ns, "echo", 1), writerImport(ns, "fresh", 0))
	return p
}

// checkImportsWritten asserts that the writer with all of the chart's
// grants brought ns to the second set of exerciseImportWriter.
func checkImportsWritten(t *testing.T, api *apiServer, p *spokeProcess, ns string) {
	t.Helper()
	p.eventually(t, "the writer with the chart's ClusterRole writes the imports of "+ns, func() bool {
		mcs := api.MCS.MulticlusterV1beta1().ServiceImports(ns)
		_, err := mcs.Get(t.Context(), "gone", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false
		}
		fresh, err := mcs.Get(t.Context(), "fresh", metav1.GetOptions{})
		if err != nil {
			return false
		}
		echo, err := mcs.Get(t.Context(), "echo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slices, err := api.Client.DiscoveryV1().EndpointSlices(ns).List(t.Context(), metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName})
		if err != nil {
			t.Fatal(err)
		}
		updated := 0
		for _, s := range slices.Items {
			if s.Endpoints[0].Addresses[0] == "10.9.0.2" {
				updated++
			}
		}
		return len(fresh.Status.Clusters) == 2 && echo.Spec.Ports[0].Port == 8081 &&
			len(echo.Status.Clusters) == 2 && echo.Status.Clusters[0].Cluster == "south" && // sorted
			len(slices.Items) == 2 && updated == 1
	})
}
