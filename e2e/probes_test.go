//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestProcessSpokeReadiness: a spoke process is live at once and ready
// only once a hub has acknowledged its cluster's full state; it stays
// ready while the hub is away.
func TestProcessSpokeReadiness(t *testing.T) {
	hubAddr, debug := freeAddr(t), freeAddr(t)
	pod := startBackend(t, "127.0.9.1", "east")
	startProcSpoke(t, hubAddr, "east", "n1", echoManifests("z-east", pod), "--debug-addr", debug)
	if !pollUntil(30*time.Second, func() bool { return httpStatusOf(t.Context(), "http://"+debug+"/healthz") == http.StatusOK }) {
		t.Fatal("the spoke's /healthz never answered")
	}
	if got := httpStatusOf(t.Context(), "http://"+debug+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz with no hub: %d, want 503", got)
	}
	h := &procHub{federation: hubAddr, xds: freeAddr(t), debug: freeAddr(t)}
	h.process = startProcess(t, "hub", "hub", "--insecure", "--id", "hub-probes",
		"--federation-addr", h.federation, "--xds-addr", h.xds, "--debug-addr", h.debug)
	if !pollUntil(time.Minute, func() bool { return httpStatusOf(t.Context(), "http://"+debug+"/readyz") == http.StatusOK }) {
		t.Fatal("the spoke never turned ready once the hub had its full state")
	}
	h.kill()
	if got := httpStatusOf(t.Context(), "http://"+debug+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz with the hub gone: %d, want 200 (the spoke's work is done)", got)
	}
}
