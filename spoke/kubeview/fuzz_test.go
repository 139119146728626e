package kubeview

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzServeHTTP: whatever a client asks (path, query, Accept), a View
// answers with a status the API server would use and a body of JSON
// documents, and is not changed by it.
func FuzzServeHTTP(f *testing.F) {
	v := New()
	if err := v.Replace(Pods, []Object{pod("demo", "echo-a", "10.2.0.1", corev1.PodRunning, map[string]string{"app": "echo"})}); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct{ method, target, accept string }{
		{"GET", "/api/v1/pods", "application/json"},
		{"GET", "/api/v1/namespaces/demo/pods/echo-a", ""},
		{"GET", "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", ""},
		{"GET", "/api/v1/pods?watch=1&resourceVersion=1&fieldSelector=status.phase%21%3DFailed&labelSelector=app%3Decho", ""},
		{"GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
		{"GET", "/apis", ""},
		{"GET", "/apis/gateway.networking.k8s.io/v1", ""},
		{"POST", "/api/v1/namespaces/demo/pods", ""},
		{"GET", "/apis//v1/x/y/z", ""},
		{"GET", "/api/v1/pods?timeoutSeconds=-1&resourceVersion=abc", ""},
	} {
		f.Add(seed.method, seed.target, seed.accept)
	}
	before := v.rv
	f.Fuzz(func(t *testing.T, method, target, accept string) {
		// A watch ends at once: its context is done.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req, err := http.NewRequestWithContext(ctx, method, "http://view"+target, nil)
		if err != nil {
			return // not a request a client could send
		}
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		v.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
		default:
			t.Fatalf("%s %s: status %d", method, target, rec.Code)
		}
		dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
		for dec.More() {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				t.Fatalf("%s %s: %v in %q", method, target, err, rec.Body.String())
			}
		}
		if rec.Code != http.StatusOK {
			var st metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" || int(st.Code) != rec.Code {
				t.Fatalf("%s %s: %d with %q, want a Status", method, target, rec.Code, rec.Body.String())
			}
		}
		if v.rv != before {
			t.Fatalf("%s %s changed the view", method, target)
		}
	})
}
