package hub

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/hub/registry"
)

// warmUp waits until the registry looks complete, and returns its
// snapshot then: every connected spoke has sent its shard, at least one
// has, and no spoke has connected or sent its shard for quiet. It gives up
// waiting after limit (a hub with no spokes yet, or one that never sends)
// or when ctx ends. It wakes on the registry's status changes only.
func warmUp(ctx context.Context, reg *registry.Registry, quiet, limit time.Duration, clk clock.Clock, log *slog.Logger) *registry.Snapshot {
	if limit <= 0 {
		return reg.Current()
	}
	start := clk.Now()
	deadline := clk.NewTimer(limit)
	defer deadline.Stop()
	// settled runs while the registry looks complete and its counts hold
	// still; it is nil otherwise.
	var settled clock.Timer
	var settledC <-chan time.Time
	defer func() {
		if settled != nil {
			settled.Stop()
		}
	}()
	connected, synced := -1, -1
	for {
		status, changed := reg.WatchStatus()
		c, s := 0, 0
		for _, st := range status {
			if st.Connected {
				c++
			}
			if st.ShardVersion > 0 {
				s++
			}
		}
		if c != connected || s != synced {
			connected, synced = c, s
			if settled != nil {
				settled.Stop()
				settled, settledC = nil, nil
			}
			if s > 0 && c <= s {
				settled = clk.NewTimer(quiet)
				settledC = settled.C()
			}
		}
		select {
		case <-ctx.Done():
			return reg.Current()
		case <-deadline.C():
			log.Warn("warm-up over with spokes missing or still syncing; serving proxies what the registry has",
				"connected", c, "synced", s, "elapsed", limit)
			return reg.Current()
		case <-settledC:
			log.Info("registry warm: serving proxies", "clusters", s, "elapsed", clk.Since(start))
			return reg.Current()
		case <-changed:
		}
	}
}
