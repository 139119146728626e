package spoke

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testlog"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// TestRunLogsStopping: a spoke asked to stop says so, with the reason,
// before it stops.
func TestRunLogsStopping(t *testing.T) {
	var logs testlog.Buffer
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Hub, cfg.Insecure, cfg.Manifests = "east", "n1", "127.0.0.1:1", true, t.TempDir()
	s, err := New(t.Context(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel(errors.New("terminated signal received"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "msg=stopping ") && strings.Contains(line, `reason="terminated signal received"`) {
			return
		}
	}
	t.Errorf("the spoke did not log that it stops, and why:\n%s", logs.String())
}
