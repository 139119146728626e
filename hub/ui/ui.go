// Package ui serves the hub's live web view on its debug port (/ui): the
// clusters grouped by network with their lease state, the services with
// their endpoints by cluster and locality, conflicts and ClusterSetIPs,
// the networks' gateways, the proxies and their sync state, and the
// end-to-end propagation latency. The page is one embedded HTML file; it
// follows /ui/events (server-sent events), on which the hub sends the whole
// state whenever it changes. It reads, like the rest of the debug port,
// and writes nothing.
package ui

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

//go:embed page.html
var page []byte

// Source is what the view shows; [State] is built from it.
type Source interface {
	State() State
}

// SourceFunc adapts a function to Source.
type SourceFunc func() State

// State implements Source.
func (f SourceFunc) State() State { return f() }

// interval is how often an open page's state is rebuilt and, when it
// changed, sent: a person reading the page notices nothing faster.
const interval = 500 * time.Millisecond

// Handlers returns the view's handlers by pattern: the page, its state as
// JSON, and the stream of states.
func Handlers(src Source) map[string]http.Handler {
	return map[string]http.Handler{
		"GET /ui": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			// The page runs only its own script and talks only to this port.
			w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'")
			_, _ = w.Write(page)
		}),
		"GET /ui/state": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(src.State())
		}),
		"GET /ui/events": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			events(r.Context(), w, src)
		}),
	}
}

// events streams the state to one page until it leaves: at once, then
// whenever it changed, checked every interval.
func events(ctx context.Context, w http.ResponseWriter, src Source) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last []byte
	for {
		st := src.State()
		b, err := json.Marshal(st)
		if err != nil {
			return
		}
		// The time alone changes on every tick: compare without it.
		st.Now = time.Time{}
		key, _ := json.Marshal(st)
		if !bytes.Equal(key, last) {
			last = key
			if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
				return
			}
			flusher.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
