package kubeview

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// bookmarkEvery is how often an idle watch that allows bookmarks is told
// the current resourceVersion, so that it resumes from a recent one.
const bookmarkEvery = time.Minute

// maxWatch bounds a watch that names no timeout, as the API server's
// --min-request-timeout does (on average).
const maxWatch = 30 * time.Minute

// request is a list or watch request, parsed.
type request struct {
	set       *set
	namespace string // "" across namespaces
	name      string // a GET of one object
	labels    labels.Selector
	fields    fields.Selector
	meta      bool // the client reads PartialObjectMetadata
	watch     bool
	// rv is the resourceVersion to watch from; initial sends the
	// current objects first (a streaming list, or a watch from "0" or
	// from none).
	rv                 uint64
	initial, bookmarks bool
	timeout            time.Duration
}

// ServeHTTP answers GETs of the View's resources, and discovery.
func (v *View) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "this API is read-only")
		return
	}
	if v.discovery(w, r.URL.Path) {
		return
	}
	req, code, err := v.parse(r)
	if err != nil {
		reason := metav1.StatusReasonBadRequest
		if code == http.StatusNotFound {
			reason = metav1.StatusReasonNotFound
		}
		writeStatus(w, code, reason, err.Error())
		return
	}
	switch {
	case req.name != "":
		v.get(w, req)
	case req.watch:
		v.serveWatch(w, r, req)
	default:
		v.list(w, req)
	}
}

// parse reads a request's path and query.
func (v *View) parse(r *http.Request) (*request, int, error) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var gv []string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gv, parts = []string{"", parts[1]}, parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gv, parts = parts[1:3], parts[3:]
	default:
		return nil, http.StatusNotFound, fmt.Errorf("the server could not find the requested resource %s", r.URL.Path)
	}
	req := &request{}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		req.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) > 2 {
		return nil, http.StatusNotFound, fmt.Errorf("the server could not find the requested resource %s", r.URL.Path)
	}
	res := Resource{}
	res.GV.Group, res.GV.Version, res.Resource = gv[0], gv[1], parts[0]
	req.set = v.sets[res.path()]
	if req.set == nil || (req.namespace != "" && !req.set.r.Namespaced) {
		return nil, http.StatusNotFound, fmt.Errorf("the server could not find the requested resource %s", r.URL.Path)
	}
	if len(parts) == 2 {
		req.name = parts[1]
	}
	q := r.URL.Query()
	var err error
	if req.labels, err = labels.Parse(q.Get("labelSelector")); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("labelSelector: %w", err)
	}
	if req.fields, err = fields.ParseSelector(q.Get("fieldSelector")); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("fieldSelector: %w", err)
	}
	for _, rq := range req.fields.Requirements() {
		if !req.set.hasField(rq.Field) {
			return nil, http.StatusBadRequest, fmt.Errorf("fieldSelector: field label not supported: %s", rq.Field)
		}
	}
	req.meta = strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata")
	req.watch = q.Get("watch") == "true" || q.Get("watch") == "1"
	req.bookmarks = q.Get("allowWatchBookmarks") == "true"
	rv := q.Get("resourceVersion")
	if rv != "" {
		if req.rv, err = strconv.ParseUint(rv, 10, 64); err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("resourceVersion %q: not a resourceVersion of this server", rv)
		}
	}
	req.initial = rv == "" || rv == "0"
	if s := q.Get("sendInitialEvents"); s != "" {
		req.initial = s == "true"
		if req.initial && (q.Get("resourceVersionMatch") != string(metav1.ResourceVersionMatchNotOlderThan) || !req.bookmarks) {
			return nil, http.StatusBadRequest, fmt.Errorf("sendInitialEvents needs resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true")
		}
	}
	req.timeout = maxWatch
	if s := q.Get("timeoutSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, http.StatusBadRequest, fmt.Errorf("timeoutSeconds %q: not a number of seconds", s)
		}
		if n > 0 {
			req.timeout = min(time.Duration(n)*time.Second, maxWatch)
		}
	}
	return req, 0, nil
}

// hasField reports whether a field selector may name field.
func (s *set) hasField(field string) bool {
	return field == "metadata.name" || field == "metadata.namespace" || slices.Contains(s.r.fieldNames, field)
}

// matches reports whether the request selects obj.
func (req *request) matches(obj *stored) bool {
	return (req.namespace == "" || obj.namespace == req.namespace) && req.labels.Matches(obj.labels) && req.fields.Matches(obj.fields)
}

func (req *request) body(obj *stored) []byte {
	if req.meta {
		return obj.meta
	}
	return obj.json
}

func (v *View) get(w http.ResponseWriter, req *request) {
	v.mu.Lock()
	obj := req.set.objs[req.namespace+"/"+req.name]
	v.mu.Unlock()
	if obj == nil {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("%s %q not found", req.set.r.Resource, req.name))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(req.body(obj))
}

func (v *View) list(w http.ResponseWriter, req *request) {
	v.mu.Lock()
	rv := v.rv
	var items [][]byte
	for _, key := range slices.Sorted(maps.Keys(req.set.objs)) {
		if obj := req.set.objs[key]; req.matches(obj) {
			items = append(items, req.body(obj))
		}
	}
	v.mu.Unlock()
	kind, apiVersion := req.set.r.Kind+"List", req.set.r.GV.String()
	if req.meta {
		kind, apiVersion = "PartialObjectMetadataList", "meta.k8s.io/v1"
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"%d"},"items":[`, kind, apiVersion, rv)
	for i, it := range items {
		if i > 0 {
			_, _ = w.Write([]byte{','})
		}
		_, _ = w.Write(it)
	}
	_, _ = w.Write([]byte("]}"))
}

// writeStatus answers with a metav1.Status, as the API server does.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(status(code, reason, message))
}

func status(code int, reason metav1.StatusReason, message string) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: message, Reason: reason, Code: int32(code),
	}
}
