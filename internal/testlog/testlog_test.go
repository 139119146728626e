package testlog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestBufferFromGoroutines(t *testing.T) {
	log, buf := New(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { log.Info("hello", "from", i) })
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "msg=hello"); n != 8 {
		t.Errorf("%d lines, want 8:\n%s", n, buf)
	}
}

func TestTail(t *testing.T) {
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if got := Tail(b.String(), 2); got != "line 3\nline 4\n" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail("a\nb\n", 5); got != "a\nb\n" {
		t.Errorf("Tail of fewer lines = %q", got)
	}
}
