// Package testlog gives tests a log that components write to from any
// goroutine, that the test can read, and that the test's output shows
// when it fails.
package testlog

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Buffer collects what is written to it from several goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// limit, when set, bounds what is kept: past it, the older half goes.
	limit int
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && b.buf.Len()+len(p) > b.limit {
		b.buf.Next(b.buf.Len() / 2)
	}
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// shown is how many of the last lines a failed test shows; kept bounds
// what a logger of New keeps, for tests and benchmarks that log much.
const (
	shown = 300
	kept  = 4 << 20
)

// New returns a text logger into a Buffer that keeps the last few
// megabytes, and has t show its last lines when it fails. It logs at debug
// level, and for a benchmark at info, so that logging weighs little on
// what it measures.
func New(t testing.TB) (*slog.Logger, *Buffer) {
	t.Helper()
	level := slog.LevelDebug
	if _, ok := t.(*testing.B); ok {
		level = slog.LevelInfo
	}
	b := &Buffer{limit: kept}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last %d lines the components logged:\n%s", shown, Tail(b.String(), shown))
		}
	})
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level})), b
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}
