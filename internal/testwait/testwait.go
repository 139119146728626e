// Package testwait waits, in tests, for a condition to hold, with a
// deadline: tests synchronize on conditions, never on sleeps.
package testwait

import (
	"testing"
	"time"
)

// Timeout bounds every wait: it matters only when a test fails.
const Timeout = 20 * time.Second

// A condition is checked at once, then after firstInterval, each wait
// twice the last up to maxInterval: a condition about to hold is seen at
// once, one that takes seconds costs little.
const (
	firstInterval = 100 * time.Microsecond
	maxInterval   = 20 * time.Millisecond
)

// For waits until cond holds, and fails t when it has not held within
// Timeout; what names what is awaited.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ForState(t, what, func() (bool, string) { return cond(), "" })
}

// ForState is For for a condition that says, when it does not hold, what
// holds instead: the failure shows the last such state.
func ForState(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	if !Within(Timeout, cond) {
		_, state := cond()
		if state != "" {
			t.Fatalf("%s: not within %v; last: %s", what, Timeout, state)
		}
		t.Fatalf("%s: not within %v", what, Timeout)
	}
}

// Within reports whether cond holds within limit: for a wait whose
// failure the caller reports itself.
func Within(limit time.Duration, cond func() (bool, string)) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	wait := time.NewTimer(firstInterval)
	defer wait.Stop()
	for interval := firstInterval; ; interval = min(2*interval, maxInterval) {
		if ok, _ := cond(); ok {
			return true
		}
		wait.Reset(interval)
		select {
		case <-wait.C:
		case <-deadline.C:
			ok, _ := cond()
			return ok
		}
	}
}
