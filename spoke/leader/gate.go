package leader

import (
	"net/http"
)

// HoldWrites wraps a Kubernetes client's transport (rest.Config.Wrap) so
// that its requests that write wait until the elector leads: a standby
// reads the cluster like the leader, to take over with warm caches, but
// writes nothing into it. A request's context bounds its wait.
//
// Holding rather than failing the writes keeps the writers' queues as
// they are: the ServiceExport status and the Events a standby would have
// written go out once it leads, where failed writes would back off for
// minutes, or be dropped. The Lease itself is written through a client of
// its own ([NewLeaseClient]), never through this one.
func (e *Elector) HoldWrites(next http.RoundTripper) http.RoundTripper {
	return &holdWrites{e: e, next: next}
}

type holdWrites struct {
	e    *Elector
	next http.RoundTripper
}

func (h *holdWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return h.next.RoundTrip(req)
	}
	if !h.e.Leading() {
		h.e.log.Debug("write held until this spoke leads", "method", req.Method, "path", req.URL.Path)
		if err := h.e.Wait(req.Context()); err != nil {
			// A RoundTripper closes the body, also when it fails.
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, err
		}
	}
	return h.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go reach the transport below.
func (h *holdWrites) WrappedRoundTripper() http.RoundTripper { return h.next }
