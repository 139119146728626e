package kubeview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// HistoryLimit is how many events of each resource a View keeps for
// watches that resume.
const HistoryLimit = 1024

// Object is what a View serves: any typed Kubernetes object.
type Object interface {
	metav1.Object
	runtime.Object
}

// View is one cluster's read-only API. Its zero value is not usable: call
// [New].
type View struct {
	mu   sync.Mutex
	rv   uint64
	sets map[string]*set // by Resource.path
}

// New returns a View that serves every resource of [Resources], empty.
func New() *View {
	v := &View{sets: map[string]*set{}}
	for _, r := range Resources {
		v.sets[r.path()] = &set{r: r, objs: map[string]*stored{}, changed: make(chan struct{})}
	}
	return v
}

// set is one resource's objects and recent events.
type set struct {
	r    Resource
	objs map[string]*stored // by namespace/name
	// history are the latest events, oldest first; dropped is the
	// resourceVersion of the last event let go (a watch from before it
	// has missed something).
	history []event
	dropped uint64
	// changed is closed, and replaced, on every change.
	changed chan struct{}
}

// stored is one object as served.
type stored struct {
	namespace, name string
	labels          labels.Set
	fields          fields.Set
	rv              uint64
	content         []byte // the object without its resourceVersion: what a change is judged by
	json, meta      []byte // the object, and its PartialObjectMetadata
	// obj is the object until it is stamped with its resourceVersion.
	obj Object
}

type event struct {
	typ  string // ADDED, MODIFIED, DELETED
	obj  *stored
	prev *stored // before a MODIFIED
	rv   uint64
}

// Replace makes objs the whole set of r's objects: an object new or whose
// content changed gets the next resourceVersion, one that is gone is
// deleted, and each makes an event for watches. objs are not kept.
func (v *View) Replace(r Resource, objs []Object) error {
	next := make(map[string]*stored, len(objs))
	for _, obj := range objs {
		s, err := encode(r, obj)
		if err != nil {
			return err
		}
		key := s.namespace + "/" + s.name
		if _, dup := next[key]; dup {
			return fmt.Errorf("%s %s: given twice", r.Resource, key)
		}
		next[key] = s
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	st, ok := v.sets[r.path()]
	if !ok {
		return fmt.Errorf("resource %s is not served", r.path())
	}
	var evs []event
	for _, key := range slices.Sorted(maps.Keys(next)) {
		s, old := next[key], st.objs[key]
		switch {
		case old == nil:
			evs = append(evs, event{typ: "ADDED", obj: s})
		case bytes.Equal(old.content, s.content):
			next[key] = old
		default:
			evs = append(evs, event{typ: "MODIFIED", obj: s, prev: old})
		}
	}
	for _, key := range slices.Sorted(maps.Keys(st.objs)) {
		if _, ok := next[key]; !ok {
			evs = append(evs, event{typ: "DELETED", obj: st.objs[key]})
		}
	}
	if len(evs) == 0 {
		return nil
	}
	for i := range evs {
		v.rv++
		evs[i].rv = v.rv
		if evs[i].typ != "DELETED" {
			if err := evs[i].obj.stamp(v.rv); err != nil {
				return err
			}
		}
	}
	st.objs = next
	st.history = append(st.history, evs...)
	if over := len(st.history) - HistoryLimit; over > 0 {
		st.dropped = st.history[over-1].rv
		st.history = append(st.history[:0:0], st.history[over:]...)
	}
	close(st.changed)
	st.changed = make(chan struct{})
	return nil
}

// encode turns obj into what a View serves, without a resourceVersion.
func encode(r Resource, obj Object) (*stored, error) {
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s: an object without a name", r.Resource)
	}
	if r.Namespaced != (obj.GetNamespace() != "") {
		return nil, fmt.Errorf("%s %s/%s: namespaced is %v for this resource", r.Resource, obj.GetNamespace(), obj.GetName(), r.Namespaced)
	}
	c := obj.DeepCopyObject().(Object)
	c.GetObjectKind().SetGroupVersionKind(r.GV.WithKind(r.Kind))
	c.SetResourceVersion("")
	content, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", r.Resource, obj.GetNamespace(), obj.GetName(), err)
	}
	s := &stored{
		obj: c, namespace: c.GetNamespace(), name: c.GetName(), labels: labels.Set(c.GetLabels()), content: content,
		fields: fields.Set{"metadata.name": c.GetName(), "metadata.namespace": c.GetNamespace()},
	}
	if r.fields != nil {
		for k, val := range r.fields(c) {
			s.fields[k] = val
		}
	}
	return s, nil
}

// stamp gives s its resourceVersion, and encodes it with it.
func (s *stored) stamp(rv uint64) error {
	s.obj.SetResourceVersion(strconv.FormatUint(rv, 10))
	var err error
	if s.json, err = json.Marshal(s.obj); err != nil {
		return err
	}
	partial := meta.AsPartialObjectMetadata(s.obj)
	partial.TypeMeta = metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}
	if s.meta, err = json.Marshal(partial); err != nil {
		return err
	}
	s.rv, s.obj = rv, nil
	return nil
}
