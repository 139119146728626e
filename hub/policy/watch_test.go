package policy_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/hub/policy"
	"github.com/meshfed/meshfed/internal/testwait"
)

func TestWatcherReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "clusters.yaml")
	write := func(s string) {
		t.Helper()
		// As a ConfigMap volume does: a new file renamed over the old.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("clusters:\n- id: east\n  networks: [n1]\n")
	p, data, err := policy.Load(path, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Clusters(); len(got) != 1 {
		t.Fatalf("Load() clusters = %v", got)
	}

	clk := clocktesting.NewFakeClock(time.Now())
	var mu sync.Mutex
	var applied []*policy.Policy
	var results []error
	w := &policy.Watcher{
		Path: path, DefaultTrustDomain: "cluster.local", Interval: time.Second, Clock: clk,
		Apply:  func(p *policy.Policy) { mu.Lock(); applied = append(applied, p); mu.Unlock() },
		Result: func(err error) { mu.Lock(); results = append(results, err); mu.Unlock() },
		Log:    slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, data) }()
	defer func() { cancel(); <-done }()

	// tick steps the clock once the watcher has its ticker. A tick the
	// watcher is too busy to take is dropped, as with a real ticker, so
	// the checks below tick until what they wait for happens.
	tick := func() {
		t.Helper()
		testwait.For(t, "the watcher to wait on its clock", clk.HasWaiters)
		clk.Step(time.Second)
	}
	counts := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(applied), len(results) }

	write("clusters:\n- id: east\n  networks: [n1]\n- id: west\n  networks: [n2]\n")
	waitUntil(t, tick, func() bool { a, r := counts(); return a == 1 && r == 1 })
	mu.Lock()
	if got := applied[0].Clusters(); len(got) != 2 || results[0] != nil {
		t.Errorf("reload: clusters %v, result %v", got, results[0])
	}
	mu.Unlock()

	write("clusters:\n- id: east\n  networks: [n1]\n  typo: 1\n")
	waitUntil(t, tick, func() bool { _, r := counts(); return r == 2 })
	for range 3 { // the same bad content again and again: reported once
		tick()
	}
	write("clusters:\n- id: north\n  networks: [n3]\n")
	waitUntil(t, tick, func() bool { a, r := counts(); return a == 2 && r == 3 })
	mu.Lock()
	if got := applied[1].Clusters(); len(got) != 1 || got[0] != "north" {
		t.Errorf("after a refused edit, the next good file applies: clusters %v", got)
	}
	if len(results) != 3 || results[1] == nil || !strings.Contains(results[1].Error(), `unknown field "typo"`) || results[2] != nil {
		t.Errorf("results %v; want ok, the bad edit refused once naming the field, ok", results)
	}
	mu.Unlock()

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, tick, func() bool { _, r := counts(); return r == 4 })
	mu.Lock()
	if len(applied) != 2 || results[3] == nil {
		t.Errorf("a missing file: %d applied, result %v; want it refused, the policy kept", len(applied), results[3])
	}
	mu.Unlock()
}

// waitUntil ticks the watcher's clock until cond holds: each check after
// a tick gives the watcher the time to take it.
func waitUntil(t *testing.T, tick func(), cond func() bool) {
	t.Helper()
	testwait.For(t, "the watcher to take the ticks", func() bool {
		tick()
		return cond()
	})
}
