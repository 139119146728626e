package file

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSnapshot(t *testing.T) {
	objs, _, err := parse([]byte(`{"apiVersion":"v1","kind":"List","items":[
		{"apiVersion":"v1","kind":"Service","metadata":{"name":"z","namespace":"b"}},
		{"apiVersion":"v1","kind":"Service","metadata":{"name":"y","namespace":"a"}},
		{"apiVersion":"v1","kind":"Service","metadata":{"name":"x","namespace":"a"}},
		{"apiVersion":"v1","kind":"Service","metadata":{"name":"w","namespace":"c"}},
		{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := map[key]metav1.Object{}
	for _, o := range objs {
		m[o.key] = o.obj
	}
	s := newSnapshot(m)

	names := func(svcs []*corev1.Service) []string {
		var out []string
		for _, svc := range svcs {
			out = append(out, svc.Namespace+"/"+svc.Name)
		}
		return out
	}
	tests := []struct {
		namespace string
		want      []string
	}{
		{"", []string{"a/x", "a/y", "b/z", "c/w"}},
		{"a", []string{"a/x", "a/y"}},
		{"c", []string{"c/w"}},
		{"0", nil},
		{"bb", nil},
		{"d", nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, names(s.Services(tt.namespace))); diff != "" {
			t.Errorf("Services(%q) mismatch (-want +got):\n%s", tt.namespace, diff)
		}
	}

	// A caller's append must not write into the snapshot.
	_ = append(s.Services("a"), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "evil"}})
	if diff := cmp.Diff([]string{"a/x", "a/y", "b/z", "c/w"}, names(s.Services(""))); diff != "" {
		t.Errorf("Services() changed by a caller's append (-want +got):\n%s", diff)
	}

	if _, ok := s.Service("a", "y"); !ok {
		t.Error("Service(a, y) not found")
	}
	if _, ok := s.Service("b", "y"); ok {
		t.Error("Service(b, y) found")
	}
	if _, ok := s.Namespace("a"); !ok {
		t.Error("Namespace(a) not found")
	}
	if _, ok := s.Node("a"); ok {
		t.Error("Node(a) found")
	}
	if got := s.Pods(""); len(got) != 0 {
		t.Errorf("Pods() = %v, want none", got)
	}
}
