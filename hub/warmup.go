package hub

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/registry"
)

// warmUp waits until the registry looks complete, and returns its
// snapshot then: every member of the clusterset the hub knows of (each
// connected spoke, and each cluster the spokes or the policy name) has
// sent its shard, at least one has, and none has joined or sent its shard
// for quiet. Withdrawn clusters are not waited for. It gives up waiting
// limit after the first spoke arrived or, while members keep finishing
// their syncs, limit after the last one did (a member that never returns
// must not hold proxies for ever, and a thousand spokes resyncing at once
// take longer than any fixed limit fit for ten), or when ctx ends. Until a spoke arrives it
// waits without limit: a replica no spoke has found yet (its address is
// new, and spokes look the hub's name up again only every few seconds)
// would serve an empty clusterset. It wakes on the registry's status
// changes only.
func warmUp(ctx context.Context, reg *registry.Registry, quiet, limit time.Duration, clk clock.Clock, log *slog.Logger) clusterset.Snapshot {
	if limit <= 0 {
		return reg.Current()
	}
	start := clk.Now()
	// deadline runs from the first spoke's arrival; nil before it.
	var deadline clock.Timer
	var deadlineC <-chan time.Time
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	// settled runs while the registry looks complete and its counts hold
	// still; it is nil otherwise.
	var settled clock.Timer
	var settledC <-chan time.Time
	defer func() {
		if settled != nil {
			settled.Stop()
		}
	}()
	waiting, synced, wasKnown := -1, -1, false
	for {
		status, changed := reg.WatchStatus()
		known := reg.MembershipKnown()
		w, s := 0, 0
		for _, st := range status {
			switch {
			case st.State == clusterset.Withdrawn:
			case st.ShardVersion > 0:
				s++
			case st.Connected || st.Expected:
				w++
			}
		}
		switch {
		case deadline == nil && len(status) > 0:
			deadline = clk.NewTimer(limit)
			deadlineC = deadline.C()
		case deadline != nil && s > synced:
			// Another member finished its sync: the clusterset is still
			// completing.
			deadline.Stop()
			deadline = clk.NewTimer(limit)
			deadlineC = deadline.C()
			log.Debug("warm-up: a member finished its sync; the limit counts from now", "synced", s, "waiting", w)
		}
		if w != waiting || s != synced || known != wasKnown {
			waiting, synced, wasKnown = w, s, known
			if settled != nil {
				settled.Stop()
				settled, settledC = nil, nil
			}
			if s > 0 && w == 0 && known {
				settled = clk.NewTimer(quiet)
				settledC = settled.C()
			}
		}
		select {
		case <-ctx.Done():
			return reg.Current()
		case <-deadlineC:
			if !known {
				log.Warn("warm-up over and no spoke named the clusterset's members (a first start, or every spoke restarted as well); serving proxies what the registry has",
					"synced", s, "waiting", w, "elapsed", clk.Since(start).Round(time.Millisecond))
				return reg.Current()
			}
			log.Warn("warm-up over with clusters missing or still syncing; serving proxies what the registry has",
				"waiting", w, "synced", s, "missing", missing(status), "elapsed", clk.Since(start).Round(time.Millisecond))
			return reg.Current()
		case <-settledC:
			log.Info("registry warm: serving proxies", "clusters", s, "elapsed", clk.Since(start))
			return reg.Current()
		case <-changed:
		}
	}
}

// missing names the clusters the warm-up still waits for (at most ten).
func missing(status []registry.ClusterStatus) []federation.ClusterID {
	var out []federation.ClusterID
	for _, st := range status {
		if st.State != clusterset.Withdrawn && st.ShardVersion == 0 && (st.Connected || st.Expected) && len(out) < 10 {
			out = append(out, st.ID)
		}
	}
	return out
}
