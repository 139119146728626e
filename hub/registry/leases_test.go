package registry

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// leaseTest is a registry whose leases run on a fake clock.
type leaseTest struct {
	r     *Registry
	clock *clocktesting.FakeClock
}

func newLeaseTest(t *testing.T, p LeasePolicy) *leaseTest {
	t.Helper()
	return newLeaseTestConfig(t, Config{Leases: p})
}

// newLeaseTestConfig is newLeaseTest with cfg, whose clock it sets.
func newLeaseTestConfig(t *testing.T, cfg Config) *leaseTest {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	lt := &leaseTest{r: New(cfg), clock: clk}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		lt.r.RunLeases(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return lt
}

// step advances the clock once the lease loop waits on it.
func (lt *leaseTest) step(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !lt.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the lease loop never waited on the clock")
		}
		runtime.Gosched()
	}
	lt.clock.Step(d)
}

// waitState waits until cluster id's lease is state.
func (lt *leaseTest) waitState(t *testing.T, id federation.ClusterID, state clusterset.ClusterState) ClusterStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		status, changed := lt.r.WatchStatus()
		for _, st := range status {
			if st.ID == id && st.State == state {
				return st
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("cluster %s never became %s: %+v", id, state, status)
		}
	}
}

// settle applies what is due now, as the lease loop does when it wakes:
// a test can then check that nothing else happens.
func (lt *leaseTest) settle() {
	lt.r.mu.Lock()
	defer lt.r.mu.Unlock()
	lt.r.advanceLeasesLocked(lt.clock.Now())
}

func eastAndWest(t *testing.T, r *Registry) (east, west *Conn) {
	t.Helper()
	east, west = r.Connect("east", ""), r.Connect("west", "")
	must(t, east.Apply("s", full("east", "n1", 1,
		[]*federationpb.Service{svc("echo"), svc("only-east")},
		[]*federationpb.Endpoint{ep("echo", "10.0.0.1"), ep("only-east", "10.0.0.2")},
		[]*federationpb.Workload{wl("u1", "10.0.0.1")})))
	must(t, west.Apply("s", full("west", "n1", 1,
		[]*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.1.0.1")}, nil)))
	return east, west
}

func staleOf(t *testing.T, s clusterset.Snapshot, key string) map[federation.ClusterID]bool {
	t.Helper()
	v, ok := s.Service(key)
	if !ok {
		return nil
	}
	out := map[federation.ClusterID]bool{}
	for _, c := range v.Clusters {
		out[c.Cluster] = c.Stale
	}
	return out
}

func TestLeaseStaleThenWithdrawn(t *testing.T) {
	lt := newLeaseTest(t, LeasePolicy{StaleAfter: 30 * time.Second, WithdrawAfter: 10 * time.Minute})
	east, _ := eastAndWest(t, lt.r)
	gone := lt.clock.Now()
	east.Close()

	st := lt.waitState(t, "east", clusterset.Live)
	if !st.StaleAt.Equal(gone.Add(30*time.Second)) || !st.WithdrawAt.Equal(gone.Add(10*time.Minute)) {
		t.Errorf("deadlines %v, %v; want 30s and 10m after %v", st.StaleAt, st.WithdrawAt, gone)
	}
	lt.step(t, 29*time.Second)
	lt.settle()
	if got := staleOf(t, lt.r.Current(), "demo/echo"); got["east"] {
		t.Fatal("stale before --stale-after")
	}
	lt.step(t, time.Second)
	st = lt.waitState(t, "east", clusterset.Stale)
	if !st.StateSince.Equal(gone.Add(30 * time.Second)) {
		t.Errorf("stale since %v", st.StateSince)
	}
	s := lt.r.Current()
	if got := staleOf(t, s, "demo/echo"); !got["east"] || got["west"] {
		t.Errorf("echo's clusters' staleness %v; want east only", got)
	}
	if c, ok := s.Cluster("east"); !ok || c.State != clusterset.Stale {
		t.Errorf("cluster east in the snapshot: %+v", c)
	}
	if _, ok := s.Workload("east/u1"); !ok {
		t.Error("a stale cluster's workloads are kept (ztunnel has no priorities)")
	}

	lt.step(t, 10*time.Minute-30*time.Second)
	st = lt.waitState(t, "east", clusterset.Withdrawn)
	s = lt.r.Current()
	if got := staleOf(t, s, "demo/echo"); len(got) != 1 || got["west"] {
		t.Errorf("echo after east's withdrawal: %v; want west's, live", got)
	}
	if _, ok := s.Service("demo/only-east"); ok {
		t.Error("a service only the withdrawn cluster exported is still served")
	}
	if _, ok := s.Workload("east/u1"); ok {
		t.Error("a withdrawn cluster's workloads are still served")
	}
	if _, ok := s.Cluster("east"); ok {
		t.Error("a withdrawn cluster is still in the clusterset")
	}
	if st.Endpoints != 0 || st.Services != 0 || st.Workloads != 0 {
		t.Errorf("a withdrawn cluster's shard is still held: %+v", st)
	}

	// It comes back: no session to resume, so it sends its full state.
	back := lt.r.Connect("east", "")
	if _, ok := back.Resume("s", 1, 1); ok {
		t.Error("resumed a withdrawn cluster's session")
	}
	lt.waitState(t, "east", clusterset.Live)
	// On another network: what it sends is tagged with that one.
	must(t, back.Apply("s2", full("east", "n7", 1, []*federationpb.Service{svc("only-east")}, []*federationpb.Endpoint{ep("only-east", "10.0.0.2")}, nil)))
	v, ok := lt.r.Current().Service("demo/only-east")
	if !ok {
		t.Fatal("a returning cluster's service is not served")
	}
	if e := v.Clusters[0].Endpoints[0]; e.Network != "n7" {
		t.Errorf("a cluster back on network n7 has its endpoint on %q", e.Network)
	}
}

// TestLeaseReturnWithoutFlap: a spoke back within --stale-after changes
// nothing proxies see; one back while stale restores its priority, and
// its unchanged full state then changes nothing more.
func TestLeaseReturnWithoutFlap(t *testing.T) {
	lt := newLeaseTest(t, LeasePolicy{StaleAfter: 30 * time.Second, WithdrawAfter: time.Minute})
	east, _ := eastAndWest(t, lt.r)
	rev := lt.r.Current().Revision()

	east.Close()
	lt.step(t, 20*time.Second)
	back := lt.r.Connect("east", "")
	if v, ok := back.Resume("s", 1, 1); !ok || v != 1 {
		t.Fatalf("resume = %d, %t", v, ok)
	}
	lt.clock.Step(time.Hour) // its old deadlines must not fire
	lt.settle()
	lt.waitState(t, "east", clusterset.Live)
	if got := lt.r.Current().Revision(); got != rev {
		t.Errorf("revision %d after %d: a return within the grace changed the clusterset", got, rev)
	}

	back.Close()
	lt.step(t, 30*time.Second)
	lt.waitState(t, "east", clusterset.Stale)
	staleRev := lt.r.Current().Revision()
	again := lt.r.Connect("east", "")
	lt.waitState(t, "east", clusterset.Live)
	s := lt.r.Current()
	if got := staleOf(t, s, "demo/echo"); got["east"] {
		t.Error("a returned cluster is still served as stale")
	}
	if s.Revision() != staleRev+1 {
		t.Errorf("revision %d after %d; want one snapshot restoring its priority", s.Revision(), staleRev)
	}
	// A restarted spoke resends the same objects: nothing changes.
	must(t, again.Apply("s2", full("east", "n1", 1,
		[]*federationpb.Service{svc("echo"), svc("only-east")},
		[]*federationpb.Endpoint{ep("echo", "10.0.0.1"), ep("only-east", "10.0.0.2")},
		[]*federationpb.Workload{wl("u1", "10.0.0.1")})))
	if got := lt.r.Current().Revision(); got != s.Revision() {
		t.Errorf("an unchanged full state after a return published revision %d after %d", got, s.Revision())
	}
}

// TestLeaseChangesLogged: each change of a lease is logged once, a lapse
// as a warning, with how long the cluster held its previous state.
func TestLeaseChangesLogged(t *testing.T) {
	var logs logRecorder
	lt := newLeaseTestConfig(t, Config{Leases: LeasePolicy{StaleAfter: 30 * time.Second, WithdrawAfter: time.Minute}, Log: slog.New(&logs)})
	east, _ := eastAndWest(t, lt.r)
	east.Close()
	lt.step(t, 30*time.Second)
	lt.waitState(t, "east", clusterset.Stale)
	lt.step(t, 30*time.Second)
	lt.waitState(t, "east", clusterset.Withdrawn)
	lt.r.Connect("east", "")
	lt.waitState(t, "east", clusterset.Live)

	want := []string{
		"WARN cluster lease changed cluster=east state=stale previous=live elapsed=30s",
		"WARN cluster lease changed cluster=east state=withdrawn previous=stale elapsed=30s",
		"INFO cluster lease changed cluster=east state=live previous=withdrawn elapsed=0s",
	}
	if got := logs.lines(); !slices.Equal(got, want) {
		t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// logRecorder is a slog.Handler that keeps each record as one line:
// level, message and attributes.
type logRecorder struct {
	mu  sync.Mutex
	out []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = append(l.out, line)
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.out)
}

func TestLeaseNeverWithdrawn(t *testing.T) {
	lt := newLeaseTest(t, LeasePolicy{StaleAfter: time.Second})
	east, _ := eastAndWest(t, lt.r)
	east.Close()
	lt.step(t, time.Second)
	st := lt.waitState(t, "east", clusterset.Stale)
	if !st.WithdrawAt.IsZero() {
		t.Errorf("withdraw at %v with --withdraw-after 0", st.WithdrawAt)
	}
	if _, ok := lt.r.Current().Service("demo/only-east"); !ok {
		t.Error("withdrawn although the policy never withdraws")
	}
}

func TestLeasePolicyValidate(t *testing.T) {
	for _, c := range []struct {
		p  LeasePolicy
		ok bool
	}{
		{DefaultLeasePolicy, true},
		{LeasePolicy{StaleAfter: time.Minute}, true},
		{LeasePolicy{StaleAfter: time.Minute, WithdrawAfter: time.Second}, false},
		{LeasePolicy{StaleAfter: -time.Second}, false},
	} {
		if err := c.p.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.p, err)
		}
	}
}

// TestLeaseExpectedMember: a member the hub learned of but never heard
// from is listed, awaited and withdrawn on the lease's schedule.
func TestLeaseExpectedMember(t *testing.T) {
	lt := newLeaseTest(t, LeasePolicy{StaleAfter: time.Second, WithdrawAfter: time.Minute})
	eastAndWest(t, lt.r)
	if n := lt.r.Expect([]federation.ClusterID{"east", "north", "north", "", "UPPER"}); n != 1 {
		t.Errorf("Expect added %d, want north only", n)
	}
	st := lt.waitState(t, "north", clusterset.Live)
	if !st.Expected || st.Connected || !st.LastSeen.IsZero() || st.WithdrawAt.IsZero() {
		t.Errorf("north: %+v", st)
	}
	if got := lt.r.Members(); !slices.Equal(got, []federation.ClusterID{"east", "north", "west"}) {
		t.Errorf("members %v", got)
	}
	lt.step(t, time.Second)
	lt.waitState(t, "north", clusterset.Stale)
	lt.step(t, time.Minute)
	lt.waitState(t, "north", clusterset.Withdrawn)
	if got := lt.r.Members(); !slices.Equal(got, []federation.ClusterID{"east", "west"}) {
		t.Errorf("members after north's withdrawal: %v", got)
	}
	// Connecting clears it.
	lt.r.Connect("north", "")
	if st := lt.waitState(t, "north", clusterset.Live); st.Expected || !st.Connected {
		t.Errorf("north after connecting: %+v", st)
	}
}
