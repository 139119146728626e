package spoke

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/transport"

	"github.com/meshfed/meshfed/spoke/leader"
)

// election is the spoke's leader election among the spokes of its cluster
// (--leader-elect). A nil *election is a spoke that leads alone.
//
// The leader runs the hub links; every spoke runs its source and shard
// builder, so that a standby's caches and shard are warm when it takes
// over. A standby's writes into the cluster (ServiceExport status, Events)
// wait in its Kubernetes client's transport until it leads.
type election struct{ *leader.Elector }

// newElection returns the election cfg asks for, nil when it asks for none.
func newElection(cfg Config, log *slog.Logger) (*election, error) {
	lc := cfg.LeaderElection
	if !lc.Enabled {
		return nil, nil
	}
	if lc.Namespace == "" {
		var ok bool
		if lc.Namespace, ok = leader.PodNamespace(); !ok {
			lc.Namespace = cfg.SystemNamespace
		}
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, err := leader.NewLeaseClient(rc)
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	e, err := leader.NewElector(lc, client, log)
	if err != nil {
		return nil, err
	}
	return &election{e}, nil
}

// run runs lead while the spoke leads, until ctx ends.
func (e *election) run(ctx context.Context, lead func(ctx context.Context) error) error {
	if e == nil {
		return lead(ctx)
	}
	return e.Run(ctx, lead)
}

// leading reports whether the spoke leads (always, without an election).
func (e *election) leading() bool { return e == nil || e.Leading() }

// holdWrites returns the wrapper of the source's Kubernetes transport that
// holds a standby's writes, none without an election.
func (e *election) holdWrites() []transport.WrapperFunc {
	if e == nil {
		return nil
	}
	return []transport.WrapperFunc{e.HoldWrites}
}

// leaderGauge is meshfed_spoke_leader: 1 while the spoke leads (always,
// without an election), so that the sum over a cluster's spokes is 1.
func leaderGauge(e *election) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshfed_spoke_leader",
		Help: "1 while this spoke leads its cluster's spokes: it streams to the hub and writes into the cluster (always, without --leader-elect); 0 while it stands by.",
	}, func() float64 {
		if e.leading() {
			return 1
		}
		return 0
	})
}
