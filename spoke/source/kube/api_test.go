package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/meshfed/meshfed/spoke/kubeclient"
)

// TestMCSServed: discovery over the REST client finds the version each MCS
// kind is served at, v1beta1 first, tells a server without the CRDs, and
// reports other failures.
func TestMCSServed(t *testing.T) {
	list := func(gv string, resources ...string) string {
		body := `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"multicluster.x-k8s.io/` + gv + `","resources":[`
		for i, r := range resources {
			if i > 0 {
				body += ","
			}
			body += `{"name":"` + r + `","namespaced":true,"kind":"X","verbs":["get"]}`
		}
		return body + "]}"
	}
	notFound := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`
	type answer struct {
		status int
		body   string
	}
	tests := []struct {
		name     string
		versions map[string]answer
		want     MCSVersions
		err      bool
	}{
		{"both versions", map[string]answer{
			"v1alpha1": {http.StatusOK, list("v1alpha1", "serviceexports", "serviceimports")},
			"v1beta1":  {http.StatusOK, list("v1beta1", "serviceexports", "serviceimports", "serviceexports/status")},
		}, MCSVersions{Exports: "v1beta1", Imports: "v1beta1"}, false},
		{"v1alpha1 only", map[string]answer{
			"v1alpha1": {http.StatusOK, list("v1alpha1", "serviceexports", "serviceimports")},
		}, MCSVersions{Exports: "v1alpha1", Imports: "v1alpha1"}, false},
		{"exports only", map[string]answer{
			"v1alpha1": {http.StatusOK, list("v1alpha1", "serviceexports")},
		}, MCSVersions{Exports: "v1alpha1"}, false},
		{"group without kinds", map[string]answer{"v1alpha1": {http.StatusOK, list("v1alpha1")}}, MCSVersions{}, false},
		{"no CRD", nil, MCSVersions{}, false},
		{"server error", map[string]answer{
			"v1alpha1": {http.StatusServiceUnavailable, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}`},
		}, MCSVersions{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for v, a := range tc.versions {
					if r.URL.Path == "/apis/multicluster.x-k8s.io/"+v {
						w.WriteHeader(a.status)
						_, _ = w.Write([]byte(a.body))
						return
					}
				}
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(notFound))
			}))
			defer srv.Close()
			// No retries of the 503: the source retries discovery itself.
			clients, err := kubeclient.New(&rest.Config{Host: srv.URL, QPS: -1}, kubeclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := NewAPI(clients).MCS.Served(context.Background())
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("Served() = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}
