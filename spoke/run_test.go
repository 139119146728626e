package spoke

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunLogsStopping: a spoke asked to stop says so, with the reason,
// before it stops.
func TestRunLogsStopping(t *testing.T) {
	var logs lockedBuffer
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Hub, cfg.Insecure, cfg.Manifests = "east", "n1", "127.0.0.1:1", true, t.TempDir()
	s, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
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

// lockedBuffer is a bytes.Buffer that goroutines may write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
