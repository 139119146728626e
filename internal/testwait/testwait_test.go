package testwait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if !Within(Timeout, func() (bool, string) { return n.Add(1) == 3, "" }) {
		t.Error("a condition that comes true is not awaited")
	}
	if n.Load() != 3 {
		t.Errorf("checked %d times, want until it held (3)", n.Load())
	}
	if Within(30*time.Millisecond, func() (bool, string) { return false, "" }) {
		t.Error("a condition that never holds holds")
	}
}
