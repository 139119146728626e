package hub

import (
	"context"
	"log/slog"
	"time"

	"github.com/meshfed/meshfed/hub/registry"
)

// warmUpPoll is how often the warm-up checks the registry. Spokes that
// connect without data publish no snapshot, so it polls their status.
const warmUpPoll = 50 * time.Millisecond

// warmUp waits until the registry looks complete, and returns its
// snapshot then: every connected spoke has sent its shard, at least one
// has, and no spoke has connected or sent its shard for quiet. It gives up
// waiting after limit (a hub with no spokes yet, or one that never sends)
// or when ctx ends.
func warmUp(ctx context.Context, reg *registry.Registry, quiet, limit time.Duration, log *slog.Logger) *registry.Snapshot {
	if limit <= 0 {
		return reg.Current()
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(warmUpPoll)
	defer tick.Stop()
	lastChange := time.Now()
	var connected, synced int
	for {
		c, s := 0, 0
		for _, st := range reg.Status() {
			if st.Connected {
				c++
			}
			if st.ShardVersion > 0 {
				s++
			}
		}
		if c != connected || s != synced {
			connected, synced, lastChange = c, s, time.Now()
		}
		if s > 0 && c <= s && time.Since(lastChange) >= quiet {
			log.Info("registry warm: serving proxies", "clusters", s)
			return reg.Current()
		}
		select {
		case <-ctx.Done():
			return reg.Current()
		case <-deadline.C:
			log.Warn("warm-up over with spokes missing or still syncing; serving proxies what the registry has",
				"connected", c, "synced", s, "after", limit)
			return reg.Current()
		case <-tick.C:
		}
	}
}
