package liveness

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBeat(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var b Beat
	if err := b.Check("loop", now, time.Minute); err != nil {
		t.Errorf("a loop that has not started: %v", err)
	}
	b.Beat(now)
	if err := b.Check("loop", now.Add(time.Minute), time.Minute); err != nil {
		t.Errorf("a minute after a beat: %v", err)
	}
	err := b.Check("push loop", now.Add(2*time.Minute), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "push loop has not turned for 2m0s") {
		t.Errorf("two minutes after a beat: %v", err)
	}
	b.Stop()
	if err := b.Check("loop", now.Add(time.Hour), time.Minute); err != nil {
		t.Errorf("a stopped loop: %v", err)
	}
}
