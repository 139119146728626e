package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

func newTestRegistry(limits Limits) *Registry {
	return New(Config{Limits: limits})
}

func svc(name string) *federationpb.Service {
	return &federationpb.Service{
		Namespace: "demo", Name: name, Hostname: name + ".demo.svc.cluster.local",
		Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Ports:  []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
		Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT},
	}
}

func ep(service, addr string) *federationpb.Endpoint {
	return &federationpb.Endpoint{Namespace: "demo", Service: service, Address: addr, Ready: true}
}

func wl(uid, ip string) *federationpb.Workload {
	return &federationpb.Workload{Uid: uid, Namespace: "demo", Name: "pod-" + uid, Ips: []string{ip}}
}

func full(id, network string, version uint64, services []*federationpb.Service, eps []*federationpb.Endpoint, wls []*federationpb.Workload) *federationpb.ShardUpdate {
	return &federationpb.ShardUpdate{
		Version: version, Full: true, Cluster: &federationpb.Cluster{Id: id, Network: network},
		Services: services, Endpoints: eps, Workloads: wls,
	}
}

func TestRegistryMergesAndTags(t *testing.T) {
	r := newTestRegistry(Limits{})
	east, west := r.Connect("east", ""), r.Connect("west", "")
	if err := east.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.0.0.1")}, []*federationpb.Workload{wl("u1", "10.0.0.1")})); err != nil {
		t.Fatal(err)
	}
	before := r.Current()
	if err := west.Apply("s", full("west", "n2", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.1.0.1"), ep("echo", "10.1.0.2")}, []*federationpb.Workload{wl("u1", "10.1.0.1")})); err != nil {
		t.Fatal(err)
	}
	s := r.Current()
	v, ok := s.Service("demo/echo")
	if !ok || len(v.Clusters) != 2 || v.EndpointCount() != 3 {
		t.Fatalf("merged echo: %+v", v)
	}
	for _, c := range v.Clusters {
		for _, e := range c.Endpoints {
			if e.Cluster != c.Cluster || e.Network != c.Network {
				t.Errorf("endpoint %s tagged %s/%s in cluster %s/%s", e.GetAddress(), e.Cluster, e.Network, c.Cluster, c.Network)
			}
		}
	}
	// Workload uids are unique per cluster only: both u1 are kept.
	if s.WorkloadCount() != 2 {
		t.Errorf("%d workloads, want 2", s.WorkloadCount())
	}
	if w, ok := s.Workload("west/u1"); !ok || w.Network != "n2" {
		t.Errorf("west/u1: %+v", w)
	}
	// The earlier snapshot is unchanged and points at the new one.
	if v, _ := before.Service("demo/echo"); len(v.Clusters) != 1 {
		t.Errorf("a published snapshot changed: %d clusters", len(v.Clusters))
	}
	if before.Next() != s || s.Next() != nil {
		t.Error("snapshot chain broken")
	}
	if got := s.Changes(); len(got.Services) != 1 || got.Services[0] != "demo/echo" || len(got.Workloads) != 1 || got.Workloads[0] != "west/u1" {
		t.Errorf("changes %+v", got)
	}
}

func TestRegistryDeltaAndNetworkChange(t *testing.T) {
	r := newTestRegistry(Limits{})
	c := r.Connect("east", "")
	must(t, c.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo"), svc("other")}, []*federationpb.Endpoint{ep("echo", "10.0.0.1"), ep("other", "10.0.0.9")}, []*federationpb.Workload{wl("u1", "10.0.0.1")})))
	must(t, c.Apply("s", &federationpb.ShardUpdate{Version: 2, Endpoints: []*federationpb.Endpoint{ep("echo", "10.0.0.2")}, RemovedEndpoints: []string{"demo/echo/10.0.0.1"}}))
	s := r.Current()
	if got := s.Changes().Services; len(got) != 1 || got[0] != "demo/echo" {
		t.Errorf("an endpoint delta changed services %v, want only demo/echo", got)
	}
	v, _ := s.Service("demo/echo")
	if v.EndpointCount() != 1 || v.Clusters[0].Endpoints[0].GetAddress() != "10.0.0.2" {
		t.Errorf("echo after delta: %+v", v.Clusters[0].Endpoints)
	}
	// Moving the cluster to another network retags everything it holds.
	must(t, c.Apply("s", &federationpb.ShardUpdate{Version: 3, Cluster: &federationpb.Cluster{Id: "east", Network: "n9"}}))
	s = r.Current()
	if v, _ := s.Service("demo/other"); v.Clusters[0].Endpoints[0].Network != "n9" {
		t.Errorf("endpoint network %s after the cluster moved to n9", v.Clusters[0].Endpoints[0].Network)
	}
	if w, _ := s.Workload("east/u1"); w.Network != "n9" {
		t.Errorf("workload network %s after the cluster moved to n9", w.Network)
	}
	// Removing a service removes it from the clusterset.
	must(t, c.Apply("s", &federationpb.ShardUpdate{Version: 4, RemovedServices: []string{"demo/other"}}))
	if _, ok := r.Current().Service("demo/other"); ok {
		t.Error("demo/other still in the clusterset after its only export was removed")
	}
}

func TestRegistryRejectsWithoutChange(t *testing.T) {
	r := newTestRegistry(Limits{MaxServices: 1, MaxEndpoints: 2, MaxWorkloads: 1})
	c := r.Connect("east", "")
	must(t, c.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.0.0.1")}, nil)))
	good := r.Current()
	tests := []struct {
		name    string
		session string
		u       *federationpb.ShardUpdate
		want    error
	}{
		{"over the service cap", "s", &federationpb.ShardUpdate{Version: 2, Services: []*federationpb.Service{svc("more")}}, federation.ErrOverLimit},
		{"full over the endpoint cap", "s", full("east", "n1", 2, nil, []*federationpb.Endpoint{ep("a", "10.0.0.1"), ep("a", "10.0.0.2"), ep("a", "10.0.0.3")}, nil), federation.ErrOverLimit},
		{"invalid object", "s", &federationpb.ShardUpdate{Version: 2, Endpoints: []*federationpb.Endpoint{ep("echo", "nope")}}, federation.ErrInvalid},
		{"delta from another session", "t", &federationpb.ShardUpdate{Version: 9, Endpoints: []*federationpb.Endpoint{ep("echo", "10.0.0.2")}}, ErrNoBase},
		{"stale version", "s", &federationpb.ShardUpdate{Version: 1, Endpoints: []*federationpb.Endpoint{ep("echo", "10.0.0.2")}}, ErrStaleVersion},
		{"full without cluster", "s", &federationpb.ShardUpdate{Version: 2, Full: true}, federation.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Apply(tc.session, tc.u)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if r.Current() != good {
				t.Error("a rejected update published a snapshot")
			}
		})
	}
}

func TestRegistryNewerConnSupersedes(t *testing.T) {
	r := newTestRegistry(Limits{})
	old := r.Connect("east", "")
	must(t, old.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo")}, nil, nil)))
	newer := r.Connect("east", "")
	select {
	case <-old.Superseded():
	default:
		t.Fatal("the older conn was not told it was superseded")
	}
	if err := old.Apply("s", &federationpb.ShardUpdate{Version: 2, RemovedServices: []string{"demo/echo"}}); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("a superseded conn wrote: %v", err)
	}
	old.Close() // must not mark the cluster disconnected
	if st := r.Status(); !st[0].Connected {
		t.Error("closing a superseded conn disconnected the cluster")
	}
	if v, ok := newer.Resume("s", 1, 1); !ok || v != 1 {
		t.Errorf("resume = %d, %t; want version 1", v, ok)
	}
	before := r.Current()
	newer.Close()
	if st := r.Status(); st[0].Connected {
		t.Error("the cluster is still connected after its stream closed")
	}
	if r.Current() != before {
		t.Error("a stream's end changed the clusterset before the cluster's lease did")
	}
	if _, ok := r.Current().Service("demo/echo"); !ok {
		t.Error("a disconnected cluster's shard was dropped")
	}
}

func TestRegistryIdenticalFullStateChangesNothing(t *testing.T) {
	r := newTestRegistry(Limits{})
	c := r.Connect("east", "")
	u := full("east", "n1", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.0.0.1")}, []*federationpb.Workload{wl("u1", "10.0.0.1")})
	must(t, c.Apply("s1", u))
	rev := r.Current().Revision()
	again := proto.CloneOf(u)
	again.Version = 1
	c.Close()
	must(t, r.Connect("east", "").Apply("s2", again))
	// A live cluster's spoke reconnecting with the same state publishes
	// nothing at all: proxies see no flap.
	if s := r.Current(); s.Revision() != rev {
		t.Errorf("revision %d after %d (changes %+v); want none", s.Revision(), rev, s.Changes())
	}
}

func TestSnapshotAwait(t *testing.T) {
	r := newTestRegistry(Limits{})
	start := r.Current()
	done := make(chan clusterset.Snapshot, 1)
	go func() {
		s, _ := clusterset.Await(context.Background(), start, func(s clusterset.Snapshot) bool { _, ok := s.Service("demo/echo"); return ok })
		done <- s
	}()
	must(t, r.Connect("east", "").Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo")}, nil, nil)))
	select {
	case s := <-done:
		if _, ok := s.Service("demo/echo"); !ok {
			t.Error("Await returned a snapshot without the service")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not return")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := clusterset.Await(ctx, r.Current(), func(clusterset.Snapshot) bool { return false }); !errors.Is(err, context.Canceled) {
		t.Errorf("Await on a cancelled context: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzApplyUpdate applies arbitrary updates after a valid shard: the
// registry must never panic, and a rejected update must leave the
// snapshot unchanged.
func FuzzApplyUpdate(f *testing.F) {
	seed, _ := proto.Marshal(&federationpb.ShardUpdate{
		Version: 2, Endpoints: []*federationpb.Endpoint{ep("echo", "10.0.0.2")}, RemovedEndpoints: []string{"demo/echo/10.0.0.1"},
		Workloads: []*federationpb.Workload{wl("u2", "10.0.0.2")},
	})
	f.Add(seed, false)
	fullSeed, _ := proto.Marshal(full("east", "n2", 3, []*federationpb.Service{svc("x")}, nil, nil))
	f.Add(fullSeed, true)
	f.Fuzz(func(t *testing.T, data []byte, asFull bool) {
		var u federationpb.ShardUpdate
		if proto.Unmarshal(data, &u) != nil {
			return
		}
		u.Full = u.Full || asFull
		r := newTestRegistry(Limits{MaxServices: 10, MaxEndpoints: 100, MaxWorkloads: 100})
		c := r.Connect("east", "")
		must(t, c.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.0.0.1")}, nil)))
		before := r.Current()
		if err := c.Apply("s", &u); err != nil && r.Current() != before {
			t.Fatalf("rejected update %v changed the registry", err)
		}
		s := r.Current()
		for _, v := range s.Services() {
			if v.Key != federation.ServiceKey(v.Namespace, v.Name) {
				t.Fatalf("service key %q for %s/%s", v.Key, v.Namespace, v.Name)
			}
		}
	})
}

// TestRegistryRandomDeltas applies random endpoint deltas and checks that
// the incrementally maintained views equal a model of the endpoints.
func TestRegistryRandomDeltas(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := newTestRegistry(Limits{})
	c := r.Connect("east", "")
	must(t, c.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo"), svc("other")}, nil, nil)))
	live := map[string]bool{} // address → ready
	for v := uint64(2); v < 300; v++ {
		u := &federationpb.ShardUpdate{Version: v}
		if rng.IntN(50) == 0 { // now and then, a full state with the same objects
			u.Full = true
			u.Cluster = &federationpb.Cluster{Id: "east", Network: "n1"}
			u.Services = []*federationpb.Service{svc("echo"), svc("other")}
			for _, e := range r.shards["east"].endpoints["demo/echo"] {
				u.Endpoints = append(u.Endpoints, e.Proto())
			}
		} else {
			touched := map[string]bool{}
			for range 1 + rng.IntN(5) {
				addr := fmt.Sprintf("10.0.0.%d", rng.IntN(40))
				if touched[addr] {
					continue
				}
				touched[addr] = true
				if _, ok := live[addr]; ok && rng.IntN(2) == 0 {
					u.RemovedEndpoints = append(u.RemovedEndpoints, "demo/echo/"+addr)
					delete(live, addr)
				} else {
					e := ep("echo", addr)
					e.Ready = rng.IntN(2) == 0
					u.Endpoints = append(u.Endpoints, e)
					live[addr] = e.Ready
				}
			}
		}
		must(t, c.Apply("s", u))
		got, _ := r.Current().Service("demo/echo")
		var gotEps []clusterset.TaggedEndpoint
		if got != nil && len(got.Clusters) > 0 {
			gotEps = got.Clusters[0].Endpoints
		}
		if len(gotEps) != len(live) || r.shards["east"].nEndpoint != len(live) {
			t.Fatalf("version %d: %d endpoints in the view, %d counted, %d live", v, len(gotEps), r.shards["east"].nEndpoint, len(live))
		}
		want := slices.Sorted(maps.Keys(live))
		for i, e := range gotEps {
			if e.GetAddress() != want[i] || e.GetReady() != live[want[i]] || e.Cluster != "east" || e.Network != "n1" {
				t.Fatalf("version %d: endpoint %d is %s (ready %v) of %s/%s, want %s (ready %v) of east/n1", v, i, e.GetAddress(), e.GetReady(), e.Cluster, e.Network, want[i], live[want[i]])
			}
		}
	}
}

// TestWatchStatus: the status channel closes on each change of a
// cluster's status (a connection, an accepted update, a disconnection),
// not before.
func TestWatchStatus(t *testing.T) {
	r := New(Config{})
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	st, ch := r.WatchStatus()
	if len(st) != 0 || closed(ch) {
		t.Fatalf("an empty registry: status %v, channel closed %v", st, closed(ch))
	}
	c := r.Connect("east", "test")
	if !closed(ch) {
		t.Fatal("a connection did not close the status channel")
	}
	st, ch = r.WatchStatus()
	if len(st) != 1 || !st[0].Connected || st[0].ShardVersion != 0 {
		t.Fatalf("after the connection: %+v", st)
	}
	if err := c.Apply("s", full("east", "n1", 1, nil, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Fatal("an accepted update did not close the status channel")
	}
	_, ch = r.WatchStatus()
	c.Close()
	if !closed(ch) {
		t.Fatal("a disconnection did not close the status channel")
	}
}

// TestStatusLastChange: the status keeps when the newest update that
// carried a change was applied and when its spoke observed the change;
// an update without an observed time (a full state resent with nothing
// new) keeps them.
func TestStatusLastChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	r := New(Config{Clock: clk})
	c := r.Connect("east", "test")
	first := full("east", "n1", 1, []*federationpb.Service{svc("echo")}, nil, nil)
	observed := clk.Now().Add(-40 * time.Millisecond)
	first.ObservedTime = timestamppb.New(observed)
	must(t, c.Apply("s", first))
	applied := clk.Now()
	check := func(when string) {
		t.Helper()
		st := r.Status()[0]
		if !st.LastChangeAt.Equal(applied) || !st.LastChangeObservedAt.Equal(observed) {
			t.Errorf("%s: last change at %v observed at %v; want %v and %v", when, st.LastChangeAt, st.LastChangeObservedAt, applied, observed)
		}
	}
	check("after the first update")

	clk.Step(time.Minute)
	must(t, c.Apply("s2", full("east", "n1", 1, []*federationpb.Service{svc("echo")}, nil, nil)))
	check("after a full state without an observed time")
	if st := r.Status()[0]; !st.LastAck.Equal(clk.Now()) {
		t.Errorf("last ack %v, want %v", st.LastAck, clk.Now())
	}
}

// TestRegistryWorkloadsByCluster: each cluster's workloads are its
// shard's own map, shared with the snapshots: an update leaves published
// snapshots as they were, and one cluster's update leaves another's map
// the same.
func TestRegistryWorkloadsByCluster(t *testing.T) {
	r := newTestRegistry(Limits{})
	east, west := r.Connect("east", ""), r.Connect("west", "")
	must(t, east.Apply("s", full("east", "n1", 1, nil, nil, []*federationpb.Workload{wl("u1", "10.0.0.1"), wl("u2", "10.0.0.2")})))
	must(t, west.Apply("s", full("west", "n2", 1, nil, nil, []*federationpb.Workload{wl("u1", "10.1.0.1")})))
	before := r.Current()
	if before.WorkloadCount() != 3 {
		t.Fatalf("%d workloads, want 3", before.WorkloadCount())
	}
	var keys []string
	for _, w := range before.Workloads() {
		keys = append(keys, w.Key()+"@"+string(w.Network))
	}
	if want := []string{"east/u1@n1", "east/u2@n1", "west/u1@n2"}; !slices.Equal(keys, want) {
		t.Errorf("workloads %v, want %v", keys, want)
	}

	changed := wl("u2", "10.0.0.2")
	changed.Ready = true
	must(t, east.Apply("s", &federationpb.ShardUpdate{Version: 2, Workloads: []*federationpb.Workload{changed, wl("u3", "10.0.0.3")}, RemovedWorkloads: []string{"u1"}}))
	after := r.Current()
	if got := after.Changes().Workloads; !slices.Equal(got, []string{"east/u1", "east/u2", "east/u3"}) {
		t.Errorf("changes %v", got)
	}
	if after.WorkloadCount() != 3 || before.WorkloadCount() != 3 {
		t.Errorf("counts %d after, %d before", after.WorkloadCount(), before.WorkloadCount())
	}
	if _, ok := after.Workload("east/u1"); ok {
		t.Error("a removed workload is still there")
	}
	if w, ok := before.Workload("east/u1"); !ok || w.Cluster != "east" {
		t.Error("an update removed a workload from a published snapshot")
	}
	if w, _ := before.Workload("east/u2"); w.GetReady() {
		t.Error("an update changed a workload of a published snapshot")
	}
	if w, _ := after.Workload("east/u2"); !w.GetReady() {
		t.Error("the changed workload is not in the new snapshot")
	}
	a, _ := after.Workload("west/u1")
	b, _ := before.Workload("west/u1")
	if a.Workload != b.Workload || a.Network != "n2" {
		t.Error("an update of east changed west's workload")
	}

	// A full state without a workload removes it; the same full state
	// again publishes nothing.
	must(t, east.Apply("s", full("east", "n1", 3, nil, nil, []*federationpb.Workload{changed})))
	if s := r.Current(); s.WorkloadCount() != 2 || !slices.Equal(s.Changes().Workloads, []string{"east/u3"}) {
		t.Errorf("after a full state: %d workloads, changes %v", s.WorkloadCount(), s.Changes().Workloads)
	}
	rev := r.Current().Revision()
	must(t, east.Apply("s", full("east", "n1", 4, nil, nil, []*federationpb.Workload{changed})))
	if r.Current().Revision() != rev {
		t.Error("the same full state again published a snapshot")
	}
	if _, ok := r.Current().Workload("no-slash"); ok {
		t.Error("a key without a cluster was found")
	}
}

// TestGatewaysKeptWhileEqual: a snapshot keeps its predecessor's gateways
// while the clusters change otherwise (a member joins without gateways),
// so that readers tell a gateway change by the pointer; a gateway change
// makes new ones.
func TestGatewaysKeptWhileEqual(t *testing.T) {
	r := newTestRegistry(Limits{})
	withGateway := func(port uint32) *federationpb.ShardUpdate {
		u := full("east", "n1", uint64(port), nil, nil, nil)
		u.Cluster.Gateways = []*federationpb.Gateway{{Address: "192.0.2.1", Port: port, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS}}
		return u
	}
	east := r.Connect("east", "")
	if err := east.Apply("s", withGateway(15443)); err != nil {
		t.Fatal(err)
	}
	before := r.Current().Gateways()
	if err := r.Connect("west", "").Apply("s", full("west", "n2", 1, nil, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if s := r.Current(); len(s.Clusters()) != 2 || s.Gateways() != before {
		t.Errorf("a member without gateways joined: %d clusters, gateways replaced: %v", len(s.Clusters()), s.Gateways() != before)
	}
	if err := east.Apply("s", withGateway(15444)); err != nil {
		t.Fatal(err)
	}
	after := r.Current().Gateways()
	if after == before || len(after.MTLS("n1")) != 1 || after.MTLS("n1")[0].GetPort() != 15444 {
		t.Errorf("east's gateway moved to 15444: gateways %v (replaced: %v)", after.All(), after != before)
	}
}
