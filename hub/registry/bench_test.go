package registry

import (
	"fmt"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// benchShard is cluster c's full shard as a spoke sends it: services
// demo/svc-0 … svc-(services-1) with perService endpoints each (the same
// services in every cluster, so they merge), plus demo/big with big
// endpoints when big > 0, and one pod workload behind every endpoint.
// Clusters alternate between networks net-0 and net-1.
func benchShard(c, services, perService, big int) *federationpb.ShardUpdate {
	id := fmt.Sprintf("c%d", c)
	u := full(id, fmt.Sprintf("net-%d", c%2), 1, nil, nil, nil)
	n := 0
	add := func(service string) {
		addr := fmt.Sprintf("10.%d.%d.%d", c, n/250, n%250+1)
		w := wl(fmt.Sprintf("uid-%d", n), addr)
		w.ServiceAccount, w.Node, w.Ready, w.Ambient = service, fmt.Sprintf("node-%d", n%50), true, true
		w.Locality = &federationpb.Locality{Region: "r1", Zone: fmt.Sprintf("z%d", n%3)}
		e := ep(service, addr)
		e.Ports = []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}}
		e.Node, e.Locality = w.GetNode(), w.GetLocality()
		e.Workload = &federationpb.WorkloadRef{Kind: "Pod", Name: w.GetName(), Uid: w.GetUid()}
		u.Endpoints = append(u.Endpoints, e)
		u.Workloads = append(u.Workloads, w)
		n++
	}
	for s := range services {
		name := fmt.Sprintf("svc-%d", s)
		u.Services = append(u.Services, svc(name))
		for range perService {
			add(name)
		}
	}
	if big > 0 {
		u.Services = append(u.Services, svc("big"))
		for range big {
			add("big")
		}
	}
	return u
}

// benchRegistry returns a registry holding the full shards of clusters
// c0 … c(clusters-1), big endpoints of demo/big in c0 only, and the
// connection of each cluster (session "s", version 1).
func benchRegistry(b *testing.B, clusters, services, perService, big int) (*Registry, []*Conn) {
	b.Helper()
	r := newTestRegistry(Limits{})
	conns := make([]*Conn, clusters)
	for c := range clusters {
		conns[c] = r.Connect(federation.ClusterID(fmt.Sprintf("c%d", c)), "")
		n := 0
		if c == 0 {
			n = big
		}
		if err := conns[c].Apply("s", benchShard(c, services, perService, n)); err != nil {
			b.Fatal(err)
		}
	}
	return r, conns
}

// loopPublishing runs op in b's loop, checks that every op published one
// snapshot of r, and reports ops per second as unit.
func loopPublishing(b *testing.B, r *Registry, unit string, op func() error) {
	b.Helper()
	rev := r.Current().Revision()
	b.ReportAllocs()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	if got := r.Current().Revision() - rev; got != uint64(b.N) {
		b.Fatalf("%d ops published %d snapshots", b.N, got)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkApplyDelta is the spoke→hub sync's steady state: one endpoint
// of one cluster flips its ready flag, in a clusterset of 10 clusters each
// exporting the same 100 services with 10 endpoints (10,000 endpoints),
// and a service with 10,000 endpoints in c0. Each delta is validated,
// patched into the shard and published as a new snapshot.
func BenchmarkApplyDelta(b *testing.B) {
	r, conns := benchRegistry(b, 10, 100, 10, 10_000)
	c0 := conns[0]
	version := uint64(1)
	for _, bc := range []struct {
		name, service string
	}{
		{"service=100-endpoints", "demo/svc-0"}, // 10 in c0, merged with 9 other clusters
		{"service=10000-endpoints", "demo/big"}, // all in c0
	} {
		// Two versions of one endpoint; every delta sends the one the shard
		// does not hold, so that every delta changes something.
		eps := r.shards["c0"].endpoints[bc.service]
		e := eps[0].Proto()
		notReady := proto.CloneOf(e)
		notReady.Ready = false
		flip := [2]*federationpb.ShardUpdate{
			{Endpoints: []*federationpb.Endpoint{notReady}},
			{Endpoints: []*federationpb.Endpoint{e}},
		}
		runFlips(b, c0, &version, bc.name, flip)
	}
	// A pod's readiness: the workload alone (its endpoint is the
	// service's, above).
	w := r.shards["c0"].workload("uid-0").Proto()
	notReady := proto.CloneOf(w)
	notReady.Ready = !w.GetReady()
	runFlips(b, c0, &version, "workload", [2]*federationpb.ShardUpdate{
		{Workloads: []*federationpb.Workload{notReady}},
		{Workloads: []*federationpb.Workload{w}},
	})
}

// runFlips applies the two deltas of flip in turn, each changing
// something, as a sub-benchmark of b.
func runFlips(b *testing.B, c *Conn, version *uint64, name string, flip [2]*federationpb.ShardUpdate) {
	b.Helper()
	applied := 0
	b.Run(name, func(b *testing.B) {
		loopPublishing(b, c.r, "deltas/s", func() error {
			*version++
			u := flip[applied%2]
			u.Version = *version
			applied++
			return c.Apply("s", u)
		})
	})
}

// BenchmarkSnapshotBuild is the cost of publishing a snapshot for one
// changed service or one changed workload, apart from validating and
// patching the shard (see BenchmarkApplyDelta for the whole path). The
// change is declared without touching the shard: the service is re-merged
// from all 10 clusters as after a real one, or the workload's cluster's
// index handed on (the copy of its bucket is the patch's: see
// BenchmarkApplyDelta/workload). Snapshots share everything else, so the
// cost should follow the number of services and workloads (the
// copy-on-write bucket cloned), not endpoints.
func BenchmarkSnapshotBuild(b *testing.B) {
	for _, scale := range []struct {
		name     string
		services int
	}{
		// 10 clusters × services × 10 endpoints, one workload per endpoint.
		{"endpoints=10k", 100},
		{"endpoints=100k", 1000},
	} {
		b.Run(scale.name, func(b *testing.B) {
			r, _ := benchRegistry(b, 10, scale.services, 10, 0)
			for _, bc := range []struct {
				name string
				ch   changeSet
			}{
				{"service", changeSet{cluster: "c0", services: map[string]struct{}{"demo/svc-0": {}}}},
				{"workload", changeSet{cluster: "c0", workloads: map[string]struct{}{"uid-0": {}}}},
			} {
				b.Run(bc.name, func(b *testing.B) {
					loopPublishing(b, r, "snapshots/s", func() error {
						r.mu.Lock()
						defer r.mu.Unlock()
						r.publishLocked(bc.ch)
						return nil
					})
				})
			}
		})
	}
}

// BenchmarkInitialShard applies a new cluster's first full shard: 10,000
// endpoints with a pod workload each, validated, indexed and published.
// The cluster joins either an empty registry or one holding 9 clusters
// that export the same 100 services (10 endpoints each); each iteration
// joins a fresh copy of it (see forkRegistry).
func BenchmarkInitialShard(b *testing.B) {
	for _, bc := range []struct {
		name                 string
		others               int
		services, perService int
	}{
		{"empty/services=100", 0, 100, 100},
		{"empty/services=1", 0, 1, 10_000},
		{"9-clusters/services=100", 9, 100, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// The joining cluster is c9 (network net-1), the others c0 … c8.
			u := benchShard(9, bc.services, bc.perService, 0)
			var base *Registry
			if bc.others > 0 {
				base, _ = benchRegistry(b, bc.others, 100, 10, 0)
			}
			b.ReportAllocs()
			for b.Loop() {
				r := newTestRegistry(Limits{})
				if base != nil {
					r = forkRegistry(base)
				}
				if err := r.Connect("c9", "").Apply("s", u); err != nil {
					b.Fatal(err)
				}
				if r.Current().WorkloadCount() != len(u.GetWorkloads())+100*10*bc.others {
					b.Fatalf("%d workloads in the clusterset", r.Current().WorkloadCount())
				}
			}
			b.ReportMetric(float64(len(u.GetEndpoints()))*float64(b.N)/b.Elapsed().Seconds(), "endpoints/s")
		})
	}
}

// forkRegistry returns a registry that starts where base is, sharing its
// shards, to which a new cluster can be added without changing base. It
// must not write the clusters base holds.
func forkRegistry(base *Registry) *Registry {
	r := New(Config{Limits: base.limits, Leases: base.leases, Clock: base.clock})
	r.shards = maps.Clone(base.shards)
	snap := *base.current.Load()
	snap.done, snap.next = make(chan struct{}), nil
	r.current.Store(&snap)
	return r
}
