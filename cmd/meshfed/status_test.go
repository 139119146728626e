package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/hub/debug"
	"github.com/meshfed/meshfed/hub/registry"
)

func TestPrintStatus(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	body := debug.ClustersResponse{Clusters: []registry.ClusterStatus{
		{
			ID: "east", Network: "n1", Connected: true, Duplicate: "two spokes stream for this cluster: 10.0.0.2:2000 holds it, 10.0.0.1:1001 was refused 3s ago",
			State: clusterset.Live, StateSince: now.Add(-time.Hour), ShardVersion: 7, LastAck: now.Add(-2 * time.Second), Build: "v0.2.0", Gateways: 1,
			LastChangeAt: now.Add(-time.Minute), LastChangeObservedAt: now.Add(-time.Minute - 42*time.Millisecond),
		},
		{
			ID: "west", Network: "n2", State: clusterset.Stale, StateSince: now.Add(-time.Minute), PolicyRefusals: 2, Nacks: 2,
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
	for i, want := range [][]string{{"v0.2.0", "1", "0", "42ms"}, {"-", "0", "2", "-"}} {
		if f := strings.Fields(lines[i+1]); !slices.Equal(f[len(f)-4:], want) {
			t.Errorf("row %d ends with %q, want BUILD, GATEWAYS, NACKS and LAG %q", i+1, f[len(f)-4:], want)
		}
	}
	// Columns are only ever added at the end: scripts read them by
	// position as well as by name.
	header := strings.Fields(strings.ReplaceAll(lines[0], "LAST ACK", "LAST_ACK"))
	if want := []string{"CLUSTER", "NETWORK", "CONNECTED", "STATE", "SINCE", "VERSION", "SERVICES", "ENDPOINTS", "WORKLOADS", "LAST_ACK", "REFUSED", "BUILD", "GATEWAYS", "NACKS", "LAG"}; !slices.Equal(header, want) {
		t.Errorf("header %q, want %q", header, want)
	}
	for i, want := range [][]string{
		{"CLUSTER", "STATE", "SINCE", "LAST ACK", "REFUSED", "BUILD", "GATEWAYS", "NACKS", "LAG"},
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

func TestLag(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		observed, applied time.Time
		want              string
	}{
		{time.Time{}, time.Time{}, "-"},
		{at.Add(-350 * time.Microsecond), at, "<1ms"},
		{at.Add(-1234567 * time.Nanosecond), at, "1.23ms"},
		{at.Add(-1234567 * time.Microsecond), at, "1.235s"},
		{at.Add(-95 * time.Second), at, "1m35s"},
		// The spoke's clock ahead of the hub's.
		{at.Add(20 * time.Millisecond), at, "-20ms"},
	} {
		if got := lag(tt.observed, tt.applied); got != tt.want {
			t.Errorf("lag(%v before) = %q, want %q", tt.applied.Sub(tt.observed), got, tt.want)
		}
	}
}
