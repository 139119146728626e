package file

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

const multiDoc = `# a leading comment
---
apiVersion: v1
kind: Service
metadata:
  name: cart
  namespace: shop
spec:
  ports:
  - port: 80
--- # a comment after the separator
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cart
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata:
  name: cart
  namespace: shop
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  namespace: ignored
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: cart-1
  labels:
    kubernetes.io/service-name: cart
addressType: IPv4
endpoints:
- addresses: [10.0.0.1]
---
apiVersion: v1
kind: EndpointSlice
metadata:
  name: wrong-group
`

const jsonList = `{"apiVersion": "v1", "kind": "List", "items": [
	{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "shop"}, "status": {"podIP": "10.0.0.1"}},
	{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"topology.istio.io/network": "n1"}}},
	{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
]}`

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		wantKeys  []key
		wantSkips []skipped
		wantDoc   int // -1: no error
		wantLine  int
	}{
		{
			name: "multi-document YAML",
			data: multiDoc,
			wantKeys: []key{
				{normalize.KindService, "shop", "cart"},
				{normalize.KindServiceExport, "shop", "cart"},
				{normalize.KindNode, "", "node-a"},
				{normalize.KindEndpointSlice, "default", "cart-1"},
			},
			wantSkips: []skipped{{"apps/v1", "Deployment"}, {"v1", "EndpointSlice"}},
			wantDoc:   -1,
		},
		{
			name:      "JSON List",
			data:      jsonList,
			wantKeys:  []key{{normalize.KindPod, "shop", "a"}, {normalize.KindNamespace, "", "shop"}},
			wantSkips: []skipped{{"v1", "ConfigMap"}},
			wantDoc:   -1,
		},
		{
			name:     "YAML flow style, byte order mark",
			data:     "\xef\xbb\xbf{apiVersion: v1, kind: Service, metadata: {name: cart}}",
			wantKeys: []key{{normalize.KindService, "default", "cart"}},
			wantDoc:  -1,
		},
		{name: "empty", data: "", wantDoc: -1},
		{name: "only comments and separators", data: "# nothing\n---\n---\n", wantDoc: -1},
		{
			name:    "syntax error in the third document",
			data:    "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n# empty\n---\nkind: Service\n  bad: [\n",
			wantDoc: 2, wantLine: 6,
		},
		{name: "no kind", data: "apiVersion: v1\nmetadata: {name: a}\n", wantDoc: 0, wantLine: 1},
		{name: "no name", data: "apiVersion: v1\nkind: Service\n", wantDoc: 0, wantLine: 1},
		{name: "not an object", data: "- a\n- b\n", wantDoc: 0, wantLine: 1},
		{name: "wrong field type", data: "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: 80}\n", wantDoc: 0, wantLine: 1},
		{name: "bad List item", data: `{"apiVersion":"v1","kind":"List","items":[{"kind":"Pod"}]}`, wantDoc: 0, wantLine: 1},
		{name: "bad separator", data: "---\n---x: 1\n", wantDoc: 0, wantLine: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, skips, err := parse([]byte(tt.data))
			if tt.wantDoc >= 0 {
				var de *docError
				if !errors.As(err, &de) || de.Document != tt.wantDoc || de.Line != tt.wantLine {
					t.Fatalf("parse() error = %v, want an error in document %d at line %d", err, tt.wantDoc, tt.wantLine)
				}
				if objs != nil {
					t.Errorf("parse() returned objects with an error: %v", objs)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse() error = %v", err)
			}
			var keys []key
			for _, o := range objs {
				keys = append(keys, o.key)
			}
			if diff := cmp.Diff(tt.wantKeys, keys, cmp.AllowUnexported(key{})); diff != "" {
				t.Errorf("parse() keys mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSkips, skips); diff != "" {
				t.Errorf("parse() skipped mismatch (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("objects are decoded", func(t *testing.T) {
		objs, _, err := parse([]byte(multiDoc))
		if err != nil {
			t.Fatal(err)
		}
		svc := objs[0].obj.(*corev1.Service)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 {
			t.Errorf("service ports = %v, want port 80", svc.Spec.Ports)
		}
		se := objs[1].obj.(*mcsv1beta1.ServiceExport)
		if se.APIVersion != "multicluster.x-k8s.io/v1beta1" {
			t.Errorf("ServiceExport apiVersion = %q, want v1beta1", se.APIVersion)
		}
		if ns := objs[2].obj.GetNamespace(); ns != "" {
			t.Errorf("Node namespace = %q, want none", ns)
		}
	})
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		multiDoc, jsonList, "", "---", "---\n---\n", "{}", "[]", "null", "a: &a [*a, *a]",
		"apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Node, metadata: {name: n}}]",
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: 80, targetPort: x}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _, err := parse(data)
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.name == "" || o.name != o.obj.GetName() || o.namespace != o.obj.GetNamespace() {
				t.Fatalf("object %+v does not match its metadata", o.key)
			}
			namespaced := o.kind != normalize.KindNode && o.kind != normalize.KindNamespace
			if namespaced == (o.namespace == "") {
				t.Fatalf("object %+v: namespace %q for a namespaced=%v kind", o.key, o.namespace, namespaced)
			}
		}
	})
}
