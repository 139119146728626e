package kubeview

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serveWatch streams a watch: the current objects first when asked (then
// a bookmark that says they are all there), then every change, until the
// request's timeout, the client going, or the events it needs being gone
// (410 Expired: it lists again).
func (v *View) serveWatch(w http.ResponseWriter, r *http.Request, req *request) {
	ctx, cancel := context.WithTimeout(r.Context(), req.timeout)
	defer cancel()
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	write := func(typ string, body []byte) bool {
		_, err := fmt.Fprintf(w, `{"type":%q,"object":%s}`+"\n", typ, body)
		return err == nil
	}

	last := req.rv
	if req.initial {
		v.mu.Lock()
		last = v.rv
		var initial []*stored
		for _, key := range slices.Sorted(maps.Keys(req.set.objs)) {
			if obj := req.set.objs[key]; req.matches(obj) {
				initial = append(initial, obj)
			}
		}
		v.mu.Unlock()
		for _, obj := range initial {
			if !write("ADDED", req.body(obj)) {
				return
			}
		}
		if req.bookmarks && !write("BOOKMARK", v.bookmark(req, last, true)) {
			return
		}
	}
	tick := time.NewTicker(bookmarkEvery)
	defer tick.Stop()
	for {
		v.mu.Lock()
		if last < req.set.dropped {
			v.mu.Unlock()
			st, _ := json.Marshal(status(http.StatusGone, metav1.StatusReasonExpired,
				fmt.Sprintf("too old resource version: %d (%d)", last, req.set.dropped)))
			write("ERROR", st)
			return
		}
		evs := req.set.since(last)
		changed, now := req.set.changed, v.rv
		v.mu.Unlock()
		for _, ev := range evs {
			if typ, obj := req.sees(ev); typ != "" && !write(typ, req.body(obj)) {
				return
			}
			last = ev.rv
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-tick.C:
			if req.bookmarks {
				// Nothing of this resource happened up to now: resuming
				// from now misses nothing.
				last = max(last, now)
				if !write("BOOKMARK", v.bookmark(req, last, false)) {
					return
				}
			}
		}
	}
}

// since returns the events after rv.
func (s *set) since(rv uint64) []event {
	i := sort.Search(len(s.history), func(i int) bool { return s.history[i].rv > rv })
	return s.history[i:]
}

// sees turns an event into what the request's selectors make of it: an
// object that stops matching is deleted for the watch, one that starts
// is added, one that never matched is nothing ("").
func (req *request) sees(ev event) (string, *stored) {
	now := req.matches(ev.obj)
	switch ev.typ {
	case "MODIFIED":
		before := req.matches(ev.prev)
		switch {
		case before && !now:
			return "DELETED", ev.prev
		case !before && now:
			return "ADDED", ev.obj
		case !now:
			return "", nil
		}
	case "ADDED", "DELETED":
		if !now {
			return "", nil
		}
	}
	return ev.typ, ev.obj
}

// bookmark is a BOOKMARK event's object: the kind and resourceVersion
// alone, and the annotation that ends a streaming list's initial events.
func (v *View) bookmark(req *request, rv uint64, initialEnd bool) []byte {
	kind, apiVersion := req.set.r.Kind, req.set.r.GV.String()
	if req.meta {
		kind, apiVersion = "PartialObjectMetadata", "meta.k8s.io/v1"
	}
	meta := map[string]any{"resourceVersion": fmt.Sprint(rv)}
	if initialEnd {
		meta["annotations"] = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	b, _ := json.Marshal(map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": meta})
	return b
}
