package leader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshfed/meshfed/internal/testwait"
)

// TestHoldWrites: a standby's reads go through, its writes wait until it
// leads (or their context ends).
func TestHoldWrites(t *testing.T) {
	var writes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writes.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(srv.Close)
	logged := &messages{}
	e, err := NewElector(testConfig("a"), &memLeases{}, slog.New(logged))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: e.HoldWrites(http.DefaultTransport)}
	do := func(ctx context.Context, method string) error {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+"/apis/x", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}

	if err := do(t.Context(), http.MethodGet); err != nil {
		t.Fatalf("a standby's GET: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := do(ctx, http.MethodPut); !errors.Is(err, context.Canceled) {
		t.Errorf("a standby's PUT with an ended context: %v, want it held until the context ended", err)
	}

	held := make(chan error, 1)
	go func() { held <- do(t.Context(), http.MethodPost) }()
	testwait.For(t, "the POST to be held", func() bool { return logged.count("write held until this spoke leads") == 2 })
	select {
	case err := <-held:
		t.Fatalf("a standby's POST returned (%v) before it led", err)
	default:
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("the server saw %d writes from a standby", n)
	}
	e.setLeading(true)
	if err := <-held; err != nil {
		t.Fatalf("the held POST once leading: %v", err)
	}
	if n := writes.Load(); n != 1 {
		t.Errorf("the server saw %d writes, want the one sent once leading", n)
	}
	if got := e.HoldWrites(http.DefaultTransport).(interface{ WrappedRoundTripper() http.RoundTripper }).WrappedRoundTripper(); got != http.DefaultTransport {
		t.Error("WrappedRoundTripper does not return the transport below")
	}
}

// messages is a slog handler that keeps the messages logged.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }

func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, r.Message)
	return nil
}

func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }

func (m *messages) count(msg string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.msgs {
		if s == msg {
			n++
		}
	}
	return n
}
