package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

// TestExportsServed: discovery over the REST client tells a server with
// the ServiceExport CRD from one without it, and reports other failures.
func TestExportsServed(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   bool
		err    bool
	}{
		{"served", http.StatusOK, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"multicluster.x-k8s.io/v1alpha1",
			"resources":[{"name":"serviceexports","namespaced":true,"kind":"ServiceExport","verbs":["get"]}]}`, true, false},
		{"group without exports", http.StatusOK, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"multicluster.x-k8s.io/v1alpha1","resources":[]}`, false, false},
		{"no CRD", http.StatusNotFound, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, false, false},
		{"server error", http.StatusServiceUnavailable, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}`, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/apis/multicluster.x-k8s.io/v1alpha1" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			// No retries of the 503: the source retries discovery itself.
			api, err := NewAPI(&rest.Config{Host: srv.URL, QPS: -1})
			if err != nil {
				t.Fatal(err)
			}
			got, err := api.Exports.Served(context.Background())
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("Served() = %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}
