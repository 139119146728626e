// Package liveness lets a long-running loop show that it still turns, for
// a liveness probe: the loop beats at least every [Interval] while it
// runs, and a probe finds it stuck when the last beat is older than a
// bound. A probe reads an atomic and never waits on the loop, so it
// answers fast even when the loop is wedged.
package liveness

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Interval is how often an idle loop beats.
const Interval = 5 * time.Second

// Beat is a loop's heartbeat. Its zero value is a loop that has not
// started, which no probe holds against it.
type Beat struct {
	last    atomic.Int64 // unix nanoseconds of the last beat; 0 before the first
	stopped atomic.Bool
}

// Beat records that the loop turned at now.
func (b *Beat) Beat(now time.Time) { b.last.Store(now.UnixNano()) }

// Stop records that the loop returned: it is no longer expected to beat.
func (b *Beat) Stop() { b.stopped.Store(true) }

// Check reports a loop that has started and not stopped, and whose last
// beat is more than stall before now. name names the loop in the error.
func (b *Beat) Check(name string, now time.Time, stall time.Duration) error {
	last := b.last.Load()
	if last == 0 || b.stopped.Load() {
		return nil
	}
	if since := now.Sub(time.Unix(0, last)); since > stall {
		return fmt.Errorf("%s has not turned for %v (more than %v)", name, since.Round(time.Second), stall)
	}
	return nil
}
