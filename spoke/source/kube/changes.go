package kube

import (
	"cmp"
	"log/slog"
	"slices"
	"strings"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// queue collects the changes the informers' handlers report until the
// delivery loop takes them. A change reported twice is delivered once.
type queue struct {
	mu      sync.Mutex
	pending map[normalize.Change]struct{}
	ready   chan struct{} // has a value when pending may be non-empty
}

func newQueue() *queue {
	return &queue{pending: map[normalize.Change]struct{}{}, ready: make(chan struct{}, 1)}
}

func (q *queue) add(changes ...normalize.Change) {
	if len(changes) == 0 {
		return
	}
	q.mu.Lock()
	for _, c := range changes {
		q.pending[c] = struct{}{}
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take returns the pending changes, sorted, and empties the queue.
func (q *queue) take() []normalize.Change {
	q.mu.Lock()
	pending := q.pending
	if len(pending) == 0 {
		q.mu.Unlock()
		return nil
	}
	// A new map, not clear(): the initial sync's map is the size of the cluster.
	q.pending = map[normalize.Change]struct{}{}
	q.mu.Unlock()
	changes := make([]normalize.Change, 0, len(pending))
	for c := range pending {
		changes = append(changes, c)
	}
	slices.SortFunc(changes, compareChanges)
	return changes
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

func compareChanges(a, b normalize.Change) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// handler turns one informer's notifications into changes. The objects it
// sees are the transformed ones.
type handler struct {
	kind normalize.Kind
	q    *queue
	log  *slog.Logger
	// same reports an update that changed nothing the cache keeps but the
	// resourceVersion.
	same func(old, cur any) bool
}

var _ cache.ResourceEventHandler = handler{}

// unchanged is a handler's same for objects of type T.
func unchanged[T any, P interface {
	*T
	metav1.Object
}](old, cur any) bool {
	a, ok1 := old.(P)
	b, ok2 := cur.(P)
	if !ok1 || !ok2 {
		return false
	}
	if a == b {
		return true // a resync hands the cached object twice
	}
	x, y := *a, *b // shallow copies, to blank the versions
	P(&x).SetResourceVersion("")
	P(&y).SetResourceVersion("")
	return equality.Semantic.DeepEqual(&x, &y)
}

func (h handler) OnAdd(obj any, _ bool) { h.q.add(h.changes(obj)...) }

// OnUpdate reports the object; for an EndpointSlice whose service-name
// label changed, both services.
func (h handler) OnUpdate(old, cur any) {
	if h.same(old, cur) {
		return
	}
	h.q.add(append(h.changes(old), h.changes(cur)...)...)
}

func (h handler) OnDelete(obj any) {
	tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
	if !ok {
		h.q.add(h.changes(obj)...)
		return
	}
	// The watch missed the delete; the tombstone holds the last cached state.
	if _, ok := tombstone.Obj.(metav1.Object); ok {
		h.q.add(h.changes(tombstone.Obj)...)
		return
	}
	namespace, name, err := cache.SplitMetaNamespaceKey(tombstone.Key)
	if err != nil || h.kind == normalize.KindEndpointSlice {
		// A slice's key does not name its service. Never seen: client-go
		// tombstones carry the cached object.
		h.log.Error("deleted object of unknown state and type; its change is lost",
			"kind", h.kind.String(), "key", tombstone.Key, "type", typeName(tombstone.Obj))
		return
	}
	h.q.add(normalize.Change{Kind: h.kind, Namespace: namespace, Name: name})
}

// changes returns the change an object's add, update or delete means.
func (h handler) changes(obj any) []normalize.Change {
	o, ok := obj.(metav1.Object)
	if !ok {
		h.log.Error("informer notification of an unexpected type", "kind", h.kind.String(), "type", typeName(obj))
		return nil
	}
	switch h.kind {
	case normalize.KindEndpointSlice:
		svc := o.GetLabels()[discoveryv1.LabelServiceName]
		if svc == "" {
			return nil // no service reads it
		}
		return []normalize.Change{{Kind: h.kind, Namespace: o.GetNamespace(), Name: svc}}
	case normalize.KindNode, normalize.KindNamespace:
		return []normalize.Change{{Kind: h.kind, Name: o.GetName()}}
	default:
		return []normalize.Change{{Kind: h.kind, Namespace: o.GetNamespace(), Name: o.GetName()}}
	}
}
