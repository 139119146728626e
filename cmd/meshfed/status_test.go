package main

import (
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/debug"
	"github.com/meshfed/meshfed/hub/registry"
)

func TestPrintStatus(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	body := debug.ClustersResponse{Clusters: []registry.ClusterStatus{
		{ID: "east", Network: "n1", Connected: true, Duplicate: "two spokes stream for this cluster: 10.0.0.2:2000 holds it, 10.0.0.1:1001 was refused 3s ago", State: federation.Live, StateSince: now.Add(-time.Hour), ShardVersion: 7, LastAck: now.Add(-2 * time.Second), Build: "v0.2.0"},
		{
			ID: "west", Network: "n2", State: federation.Stale, StateSince: now.Add(-time.Minute), PolicyRefusals: 2, Nacks: 2,
			LastNack: now.Add(-3 * time.Second), LastNackReason: `cluster "west": version 4: cluster west: network: network "n1" is not one of the cluster's (allowed: "n2") (not allowed by the cluster policy)`,
		},
	}}
	var b strings.Builder
	if err := printStatus(&b, body, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a header, two rows, a duplicate line and a rejection line, got:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"CLUSTER", "STATE", "SINCE", "LAST ACK", "REFUSED", "BUILD"},
		{"east", "live", "1h0m0s ago", "2s ago", " 0 ", "v0.2.0"},
		{"west", "stale", "1m0s ago", "never", " 2 ", " -"},
		{"east: two spokes stream for this cluster: 10.0.0.2:2000 holds it"},
		{"west: update rejected 3s ago:", `network "n1" is not one of the cluster's`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}
