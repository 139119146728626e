package hub

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReadyz: /readyz answers 200 once the hub serves proxies (here,
// once its only spoke has sent its shard and the warm-up's quiet time
// passed), and the hub stops reporting ready once its context ends.
func TestReadyz(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr, cfg.Insecure = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", true
	cfg.XDSWarmUpQuiet = 10 * time.Millisecond
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
	readyz := func() int {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	deadline := time.Now().Add(time.Minute)
	for readyz() != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz never answered while warming up")
		}
		<-poll.C
	}
	if h.Ready() {
		t.Error("ready with no spoke: a replica nobody has found yet would serve an empty clusterset")
	}
	east := h.Registry().Connect("east", "s")
	defer east.Close()
	h.Registry().Expect([]federation.ClusterID{"east"})
	if err := east.Apply("s", shard("east")); err != nil {
		t.Fatal(err)
	}
	for readyz() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/readyz never answered 200 after the warm-up")
		}
		<-poll.C
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.Ready() {
		t.Error("still ready after Run returned")
	}
}

// TestRunLogsStopping: a hub asked to stop says so, with the reason.
func TestRunLogsStopping(t *testing.T) {
	var logs testlog.Buffer
	cfg := DefaultConfig()
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr, cfg.Insecure = "127.0.0.1:0", "", "", true
	h, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	cancel(errors.New("interrupt signal received"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := `msg=stopping reason="interrupt signal received"`; !strings.Contains(logs.String(), want) {
		t.Errorf("the hub's log lacks %s:\n%s", want, logs.String())
	}
}
