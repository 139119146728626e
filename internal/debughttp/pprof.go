package debughttp

import (
	"net/http"
	"net/http/pprof"
)

// RegisterPprof serves Go's profiles under /debug/pprof/ on mux, for GET
// (and so HEAD) only. The index also serves every named profile, with its
// parameters: /debug/pprof/heap?gc=1 collects garbage first, as the load
// harness asks. cmdline serves /debug/pprof/cmdline; without it that page
// is a 404, because the command line names key and certificate files.
//
// /debug/pprof/symbol takes GET only: go tool pprof posts to it only for
// profiles without symbols, and Go's profiles carry theirs.
func RegisterPprof(mux *http.ServeMux, cmdline bool) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	if cmdline {
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		return
	}
	// Registered rather than left to the index, which would answer
	// "Unknown profile" and leave the reader guessing.
	mux.HandleFunc("GET /debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "the command line is not served: it names key and certificate files (--debug-cmdline serves it)", http.StatusNotFound)
	})
}
