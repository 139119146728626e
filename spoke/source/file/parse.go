package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// key identifies an object of a cluster.
type key struct {
	kind      normalize.Kind
	namespace string // "" for Nodes and Namespaces
	name      string
}

// object is one parsed Kubernetes object: a *corev1.Service,
// *mcsv1beta1.ServiceExport, *discoveryv1.EndpointSlice, *corev1.Pod,
// *corev1.Node or *corev1.Namespace.
type object struct {
	key
	obj metav1.Object
}

// skipped is the type of a document the source does not use.
type skipped struct {
	APIVersion string
	Kind       string
}

// docError is why a document of a file could not be decoded. Document
// indexes count from 0, as in yq. Line is the document's first line in
// the file (from 1): line numbers in YAML errors count from there.
type docError struct {
	Document int
	Line     int
	Err      error
}

func (e *docError) Error() string {
	return fmt.Sprintf("document %d (from line %d): %v", e.Document, e.Line, e.Err)
}

func (e *docError) Unwrap() error { return e.Err }

// parse decodes the objects of one manifest file: YAML (one or more
// documents) or JSON, with kind: List unpacked. Documents of other kinds
// are returned as skipped. The first document that cannot be decoded
// fails the whole file, so that a file is applied all or nothing.
func parse(data []byte) ([]object, []skipped, error) {
	var (
		objs  []object
		skips []skipped
	)
	for i, doc := range splitDocuments(data) {
		j, err := toJSON(doc.data)
		if err != nil {
			return nil, nil, &docError{Document: i, Line: doc.line, Err: err}
		}
		if j == nil {
			continue // empty or only comments
		}
		if err := decode(j, &objs, &skips); err != nil {
			return nil, nil, &docError{Document: i, Line: doc.line, Err: err}
		}
	}
	return objs, skips, nil
}

type document struct {
	line int // of the document's first line
	data []byte
}

// splitDocuments splits YAML at "---" lines. Unlike apimachinery's
// YAMLReader it keeps empty documents, so that document indexes in errors
// match what the user counts.
func splitDocuments(data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	var docs []document
	cur := document{line: 1}
	started := false // whether cur has content, so that a leading "---" opens no empty document
	for n, line := range bytes.SplitAfter(data, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok && (len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r') {
			if started || len(docs) > 0 {
				docs = append(docs, cur)
			}
			// Copy: appending to a subslice of data would overwrite data.
			cur = document{line: n + 1, data: bytes.Clone(rest)}
			started = true
			continue
		}
		cur.data = append(cur.data, line...)
		if content := bytes.TrimSpace(line); len(content) > 0 && content[0] != '#' {
			started = true
		}
	}
	return append(docs, cur)
}

// toJSON converts one document to JSON, or returns nil for an empty one.
func toJSON(doc []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(doc)
	if json.Valid(trimmed) {
		return nullToNil(trimmed), nil
	}
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	return nullToNil(j), nil
}

func nullToNil(j []byte) []byte {
	if len(j) == 0 || string(j) == "null" {
		return nil
	}
	return j
}

// decode appends the object in j (or the items of a List) to objs.
func decode(j []byte, objs *[]object, skips *[]skipped) error {
	var head metav1.TypeMeta
	if err := json.Unmarshal(j, &head); err != nil {
		return err
	}
	if head.APIVersion == "" || head.Kind == "" {
		return errNoKind
	}

	var (
		o   object
		err error
	)
	switch head.APIVersion + "/" + head.Kind {
	case "v1/List":
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(j, &list); err != nil {
			return fmt.Errorf("v1 List: %w", err)
		}
		for i, item := range list.Items {
			if err := decode(item, objs, skips); err != nil {
				return fmt.Errorf("items[%d]: %w", i, err)
			}
		}
		return nil
	case "v1/Service":
		o, err = decodeAs[corev1.Service](j, normalize.KindService, true)
	case "v1/Pod":
		o, err = decodeAs[corev1.Pod](j, normalize.KindPod, true)
	case "v1/Node":
		o, err = decodeAs[corev1.Node](j, normalize.KindNode, false)
	case "v1/Namespace":
		o, err = decodeAs[corev1.Namespace](j, normalize.KindNamespace, false)
	case "discovery.k8s.io/v1/EndpointSlice":
		o, err = decodeAs[discoveryv1.EndpointSlice](j, normalize.KindEndpointSlice, true)
	case "multicluster.x-k8s.io/v1alpha1/ServiceExport", "multicluster.x-k8s.io/v1beta1/ServiceExport":
		// v1alpha1 and v1beta1 ServiceExports have the same schema.
		o, err = decodeAs[mcsv1beta1.ServiceExport](j, normalize.KindServiceExport, true)
		if err == nil {
			se := o.obj.(*mcsv1beta1.ServiceExport)
			se.APIVersion = mcsv1beta1.GroupVersion.String()
		}
	default:
		*skips = append(*skips, skipped{APIVersion: head.APIVersion, Kind: head.Kind})
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", head.APIVersion, head.Kind, err)
	}
	*objs = append(*objs, o)
	return nil
}

// decodeAs decodes j as a T. Namespaced objects without a namespace are in
// "default", as kubectl would create them; cluster-scoped objects have none.
func decodeAs[T any, PT interface {
	*T
	metav1.Object
}](j []byte, kind normalize.Kind, namespaced bool) (object, error) {
	obj := PT(new(T))
	if err := json.Unmarshal(j, obj); err != nil {
		return object{}, err
	}
	if obj.GetName() == "" {
		return object{}, errors.New("metadata.name is empty")
	}
	switch {
	case !namespaced:
		obj.SetNamespace("")
	case obj.GetNamespace() == "":
		obj.SetNamespace(metav1.NamespaceDefault)
	}
	return object{key: key{kind: kind, namespace: obj.GetNamespace(), name: obj.GetName()}, obj: obj}, nil
}

// knownKind reports kinds the source reads in some apiVersion, so that a
// document of such a kind in another apiVersion deserves a warning.
func knownKind(kind string) bool {
	switch kind {
	case "Service", "Pod", "Node", "Namespace", "EndpointSlice", "ServiceExport":
		return true
	}
	return false
}
