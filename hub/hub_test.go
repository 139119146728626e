package hub

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReadyz: /readyz answers 200 while the hub serves, and the hub stops
// reporting ready once its context ends.
func TestReadyz(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr, cfg.Insecure = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", true
	h, err := New(cfg, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	if h.Ready() {
		t.Error("ready before Run")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.DebugAddr().String()+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for ; ; <-poll.C {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200: %v", err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.Ready() {
		t.Error("still ready after Run returned")
	}
}
