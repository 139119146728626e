package writeback

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// Event rate limits. An object gets one Event per rejection (a reason,
// field and value) until its rejection changes; all objects together get at
// most eventBurst at once and eventQPS after, so that a bad rollout of many
// objects does not take the API server requests the status writes need.
const (
	eventQPS        = 5
	eventBurst      = 50
	eventRetries    = 5
	eventRetryBase  = time.Second
	eventRetryMax   = time.Minute
	eventSourceName = "meshfed-spoke"
)

// objectRef names a rejected object.
type objectRef struct {
	kind            normalize.Kind
	namespace, name string
}

// rejectedObject is an object the shard builder rejects.
type rejectedObject struct {
	normalize.Rejection
	kept bool
}

// signature is what an Event says: a new one is due when it changes.
func (r rejectedObject) signature() string {
	return string(r.Reason) + "\x00" + r.Field + "\x00" + r.Value + "\x00" + strconv.FormatBool(r.kept)
}

// message is the sentence of the object's Event and of its service's
// ServiceExport Valid condition.
func (r rejectedObject) message() string {
	what := "it is not federated"
	if r.kept {
		what = "its last good version stays federated"
	}
	return r.Error() + "; " + what
}

// rejections holds what the shard builder reports through
// [WriteBack.Rejected] and [WriteBack.Accepted], for the Events and the
// ServiceExport conditions.
type rejections struct {
	mu      sync.Mutex
	objects map[objectRef]rejectedObject
	evented map[objectRef]string // the signature of the object's last Event
	// changed is told the service of an object whose rejection changed
	// (nil until the status writer runs).
	changed func(service string)
	// events holds the objects that may be due an Event (nil when the
	// source records none, or is not running).
	events workqueue.TypedRateLimitingInterface[objectRef]
}

func newRejections() *rejections {
	return &rejections{objects: map[objectRef]rejectedObject{}, evented: map[objectRef]string{}}
}

// startEvents returns the queue of the objects due an Event, which
// Rejected fills until it is shut down.
func (rs *rejections) startEvents() workqueue.TypedRateLimitingInterface[objectRef] {
	q := workqueue.NewTypedRateLimitingQueue(
		workqueue.NewTypedItemExponentialFailureRateLimiter[objectRef](eventRetryBase, eventRetryMax))
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.events = q
	for ref := range rs.objects {
		q.Add(ref)
	}
	return q
}

// Rejected is told by the shard builder that it rejects an object (see
// [normalize.Rejection]); kept says whether its last good version stays
// in the shard. The write-back records a Warning Event on the object and, when
// it belongs to an exported service, says why in the ServiceExport's Valid
// condition. It returns at once.
func (w *WriteBack) Rejected(r normalize.Rejection, kept bool) {
	ref := objectRef{r.Kind, r.Namespace, r.Name}
	rs := w.rejections
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.objects[ref] = rejectedObject{r, kept}
	if rs.events != nil {
		rs.events.Add(ref)
	}
	if rs.changed != nil && r.Service != "" {
		rs.changed(r.Service)
	}
}

// Accepted is told by the shard builder that an object it rejected is
// good again, gone, or no longer federated. It returns at once.
func (w *WriteBack) Accepted(kind normalize.Kind, namespace, name string) {
	ref := objectRef{kind, namespace, name}
	rs := w.rejections
	rs.mu.Lock()
	defer rs.mu.Unlock()
	prev, ok := rs.objects[ref]
	if !ok {
		return
	}
	delete(rs.objects, ref)
	delete(rs.evented, ref)
	if rs.changed != nil && prev.Service != "" {
		rs.changed(prev.Service)
	}
}

// notify sets what is told about changed services.
func (rs *rejections) notify(changed func(service string)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.changed = changed
}

// validStatus is what the rejected objects of an exported service make its
// Valid condition say, and false when it has none.
func (rs *rejections) validStatus(service string) (normalize.ExportStatus, bool) {
	objs := rs.ofService(service)
	if len(objs) == 0 {
		return normalize.ExportStatus{}, false
	}
	msg := objs[0].message()
	if len(objs) > 1 {
		msg += fmt.Sprintf(" (and %d more rejected objects of the service)", len(objs)-1)
	}
	return normalize.ExportStatus{Reason: normalize.ReasonRejected, Message: msg}, true
}

// ofService returns the rejected objects of a service, sorted: the Service
// first, then its slices by name.
func (rs *rejections) ofService(key string) []rejectedObject {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []rejectedObject
	for _, r := range rs.objects {
		if r.Service == key {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b rejectedObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), strings.Compare(a.Name, b.Name))
	})
	return out
}

// due returns the Event an object is due, and false when it has had it or
// is no longer rejected.
func (rs *rejections) due(ref objectRef) (rejectedObject, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.objects[ref]
	if !ok || rs.evented[ref] == r.signature() {
		return rejectedObject{}, false
	}
	return r, true
}

// sent records that an object had the Event for r, unless its rejection
// changed meanwhile.
func (rs *rejections) sent(ref objectRef, r rejectedObject) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if cur, ok := rs.objects[ref]; ok && cur.signature() == r.signature() {
		rs.evented[ref] = r.signature()
	}
}
