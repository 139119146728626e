package hub

import (
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testlog"
)

func shard(id string) *federationpb.ShardUpdate {
	return &federationpb.ShardUpdate{
		Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: id, Network: "n1"},
		Services: []*federationpb.Service{{
			Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local",
			Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
			Ports:  []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
			Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_LABEL},
		}},
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestWarmUpWaitsForConnectedSpokes: a spoke that has connected but not
// sent its shard holds the warm-up (whose limit is an hour here), and the
// snapshot it returns has that spoke's data.
func TestWarmUpWaitsForConnectedSpokes(t *testing.T) {
	reg := registry.New(registry.Config{})
	if err := reg.Connect("east", "s").Apply("s", shard("east")); err != nil {
		t.Fatal(err)
	}
	west := reg.Connect("west", "s")
	reg.Expect([]federation.ClusterID{"east", "west"}) // what their Hellos named
	done := make(chan clusterset.Snapshot)
	go func() { done <- warmUp(t.Context(), reg, 20*time.Millisecond, time.Hour, clock.RealClock{}, quietLog) }()
	if err := west.Apply("s", shard("west")); err != nil {
		t.Fatal(err)
	}
	select {
	case snap := <-done:
		if _, ok := snap.Cluster("west"); !ok {
			t.Errorf("warm with west connected but not in the snapshot: %v", snap.Clusters())
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up never ended although both connected spokes sent their shards")
	}
}

// TestWarmUpGivesUp: with no spoke, the warm-up holds (a replica no
// spoke has found yet must not serve an empty clusterset); its limit
// counts from the first spoke's arrival.
func TestWarmUpGivesUp(t *testing.T) {
	reg := registry.New(registry.Config{})
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	const limit = time.Minute
	done := make(chan clusterset.Snapshot, 1)
	go func() { done <- warmUp(t.Context(), reg, time.Hour, limit, clk, quietLog) }()
	clk.Step(10 * limit)
	if len(done) != 0 {
		t.Fatal("warm with no spoke at all")
	}
	east := reg.Connect("east", "s") // connects and never sends its shard
	defer east.Close()
	awaitWaiters(t, clk, 1) // the deadline, from now
	clk.Step(limit - time.Second)
	if len(done) != 0 {
		t.Fatal("warm before the limit after the first spoke arrived")
	}
	clk.Step(time.Second)
	select {
	case snap := <-done:
		if len(snap.Clusters()) != 0 {
			t.Errorf("clusters %v, want none", snap.Clusters())
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up did not end at its limit after the first spoke arrived")
	}
	if snap := warmUp(t.Context(), reg, time.Hour, 0, clock.RealClock{}, quietLog); snap != reg.Current() {
		t.Error("a warm-up of 0 did not return at once with the current snapshot")
	}
}

// TestWarmUpWaitsWhileMembersSync: the limit counts from the last member
// that finished its sync, so that a large clusterset resyncing after a
// restart is not served half-built when it takes longer than the limit;
// a member that never syncs ends the warm-up a limit after the last one
// did.
func TestWarmUpWaitsWhileMembersSync(t *testing.T) {
	reg := registry.New(registry.Config{})
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	const limit = time.Minute
	reg.Expect([]federation.ClusterID{"east", "west", "north"})
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	done := make(chan clusterset.Snapshot, 1)
	go func() { done <- warmUp(t.Context(), reg, time.Second, limit, clk, log) }()
	north := reg.Connect("north", "s") // connects and never sends its shard
	defer north.Close()
	awaitWaiters(t, clk, 1) // the deadline, from north's arrival
	for i, id := range []string{"east", "west"} {
		clk.Step(limit - time.Second)
		if err := reg.Connect(federation.ClusterID(id), "s").Apply("s", shard(id)); err != nil {
			t.Fatal(err)
		}
		awaitLog(t, &logs, "the limit counts from now", i+1)
	}
	// Two limits less two seconds after north arrived: past the limit from
	// the first arrival, within the one from west's sync.
	if len(done) != 0 {
		t.Fatal("warm while members were still finishing their syncs")
	}
	clk.Step(limit - time.Second)
	if len(done) != 0 {
		t.Fatal("warm before the limit after the last sync")
	}
	clk.Step(time.Second)
	select {
	case snap := <-done:
		if len(snap.Clusters()) != 2 {
			t.Errorf("warm snapshot has %v, want east and west", snap.Clusters())
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up did not end a limit after the last member synced")
	}
}

// awaitLog waits until the log holds n lines with s.
func awaitLog(t *testing.T, logs *testlog.Buffer, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for strings.Count(logs.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d log lines with %q, want %d", strings.Count(logs.String(), s), s, n)
		}
		runtime.Gosched()
	}
}

// TestWarmUpFollowsStatus drives the warm-up with a fake clock: it waits
// as long as a connected spoke has not sent its shard, restarts its quiet
// time when another spoke connects, and serves once the quiet time passes
// with every connected spoke synced.
func TestWarmUpFollowsStatus(t *testing.T) {
	reg := registry.New(registry.Config{})
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	const quiet = time.Second
	if err := reg.Connect("east", "s").Apply("s", shard("east")); err != nil {
		t.Fatal(err)
	}
	west := reg.Connect("west", "s")
	reg.Expect([]federation.ClusterID{"east"}) // east's Hello named the clusterset as it knew it
	done := make(chan clusterset.Snapshot, 1)
	go func() { done <- warmUp(t.Context(), reg, quiet, time.Hour, clk, quietLog) }()
	awaitWaiters(t, clk, 1) // the deadline alone: west has sent nothing
	clk.Step(10 * quiet)
	if len(done) != 0 {
		t.Fatal("warm with a connected spoke that has not sent its shard")
	}

	if err := west.Apply("s", shard("west")); err != nil {
		t.Fatal(err)
	}
	awaitWaiters(t, clk, 2) // the deadline and the quiet time
	clk.Step(quiet / 2)
	north := reg.Connect("north", "s") // connects during the quiet time
	awaitWaiters(t, clk, 1)
	if err := north.Apply("s", shard("north")); err != nil {
		t.Fatal(err)
	}
	awaitWaiters(t, clk, 2)
	clk.Step(quiet / 2)
	if len(done) != 0 {
		t.Fatal("warm before the quiet time after the last spoke synced")
	}
	clk.Step(quiet / 2)
	select {
	case snap := <-done:
		if len(snap.Clusters()) != 3 {
			t.Errorf("warm snapshot has %d clusters, want 3", len(snap.Clusters()))
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up did not end after the quiet time")
	}
}

// TestWarmUpNeedsNamedMembers: a spoke that has never heard from a hub
// names no members. Its shard alone does not end the warm-up of a hub
// that cannot tell a first start from a restart only that spoke has
// reached: the warm-up waits for a spoke that names the members, or its
// limit.
func TestWarmUpNeedsNamedMembers(t *testing.T) {
	reg := registry.New(registry.Config{})
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	const quiet, limit = time.Second, time.Minute
	if err := reg.Connect("north", "s").Apply("s", shard("north")); err != nil {
		t.Fatal(err)
	}
	done := make(chan clusterset.Snapshot, 1)
	go func() { done <- warmUp(t.Context(), reg, quiet, limit, clk, quietLog) }()
	awaitWaiters(t, clk, 1) // the deadline alone
	clk.Step(10 * quiet)
	if len(done) != 0 {
		t.Fatal("warm on the shard of a spoke that named no members")
	}
	reg.Expect([]federation.ClusterID{"east", "north"}) // east's Hello, say
	if err := reg.Connect("east", "s").Apply("s", shard("east")); err != nil {
		t.Fatal(err)
	}
	awaitWaiters(t, clk, 2)
	clk.Step(quiet)
	select {
	case snap := <-done:
		if len(snap.Clusters()) != 2 {
			t.Errorf("warm snapshot has %d clusters, want 2", len(snap.Clusters()))
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up did not end once the members were named and synced")
	}

	// Nobody ever names them (a first start): the limit ends it.
	fresh := registry.New(registry.Config{})
	if err := fresh.Connect("north", "s").Apply("s", shard("north")); err != nil {
		t.Fatal(err)
	}
	go func() { done <- warmUp(t.Context(), fresh, quiet, limit, clk, quietLog) }()
	awaitWaiters(t, clk, 1)
	clk.Step(limit)
	select {
	case snap := <-done:
		if len(snap.Clusters()) != 1 {
			t.Errorf("snapshot at the limit has %d clusters, want north's", len(snap.Clusters()))
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up did not end at its limit")
	}
}

// awaitWaiters waits until the warm-up's timers are n.
func awaitWaiters(t *testing.T, clk *testingclock.FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for clk.Waiters() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the warm-up waits on %d timers, want %d", clk.Waiters(), n)
		}
		runtime.Gosched()
	}
}

// TestWarmUpWaitsForExpectedClusters: a member another spoke named (here,
// west, which a restarted hub has not heard from yet) holds the warm-up
// although every connected spoke has synced; it ends when west has sent
// its shard.
func TestWarmUpWaitsForExpectedClusters(t *testing.T) {
	reg := registry.New(registry.Config{})
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	const quiet = time.Second
	if err := reg.Connect("east", "s").Apply("s", shard("east")); err != nil {
		t.Fatal(err)
	}
	if n := reg.Expect([]federation.ClusterID{"east", "west", "Not_A_Label"}); n != 1 {
		t.Fatalf("Expect added %d clusters, want west only", n)
	}
	done := make(chan clusterset.Snapshot, 1)
	go func() { done <- warmUp(t.Context(), reg, quiet, time.Hour, clk, quietLog) }()
	awaitWaiters(t, clk, 1) // the deadline alone: west is awaited
	clk.Step(10 * quiet)
	if len(done) != 0 {
		t.Fatal("warm while an expected member has not sent its shard")
	}
	if err := reg.Connect("west", "s").Apply("s", shard("west")); err != nil {
		t.Fatal(err)
	}
	awaitWaiters(t, clk, 2)
	clk.Step(quiet)
	select {
	case snap := <-done:
		if len(snap.Clusters()) != 2 {
			t.Errorf("warm snapshot has %d clusters, want 2", len(snap.Clusters()))
		}
	case <-time.After(time.Minute):
		t.Fatal("warm-up did not end after the expected member synced")
	}
}
