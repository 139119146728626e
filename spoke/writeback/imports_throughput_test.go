package writeback

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
)

// BenchmarkImportConvergence measures how long a spoke takes to write
// 5,000 imports into a cluster that has none (each a ServiceImport, its
// status and one EndpointSlice, every other one a second slice of a
// gateway), at several rate limits, and how long a restarted spoke takes
// to find that it has nothing to write. It takes minutes (at 50 writes a
// second alone, six), so it is a benchmark, which make test does not run.
// BENCHMARKS.md has the numbers:
//
//	go test -run '^$' -bench ImportConvergence -benchtime 1x -timeout 60m -v ./spoke/writeback/
func BenchmarkImportConvergence(b *testing.B) {
	const services, namespaces = 5000, 50
	set := make([]*federationpb.Import, 0, services)
	for i := range services {
		ns := fmt.Sprintf("bench-%02d", i%namespaces)
		im := &federationpb.Import{
			Namespace: ns, Name: fmt.Sprintf("svc-%04d", i), Type: federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP, Mcs: true,
			Ports:      []*federationpb.ServicePort{{Name: "http", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
			Ips:        []string{fmt.Sprintf("10.96.%d.%d", 100+i/250, i%250)},
			IpFamilies: []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4},
			Clusters:   []string{"west"},
			Sources:    []*federationpb.ImportSource{{Cluster: "west", Endpoints: podEndpoints(3, fmt.Sprintf("10.%d.%%d.%%d", 1+i%200))}},
		}
		if i%2 == 1 {
			im.Clusters = append(im.Clusters, "north")
			im.Sources = append(im.Sources, &federationpb.ImportSource{Cluster: "north", ViaGateway: true, Endpoints: []*federationpb.Endpoint{
				{Address: "gw.north.example.com", Ports: []*federationpb.EndpointPort{{Name: "http", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 15443}}, Ready: true, Serving: true},
			}})
		}
		set = append(set, im)
	}
	keys := make([]string, len(set))
	for i, im := range set {
		keys[i] = im.GetNamespace() + "/" + im.GetName()
	}

	for _, tc := range []struct {
		name    string
		qps     float64
		burst   int
		workers int // 0: the default
	}{
		// What the writes would get sharing the source's limiter at its
		// default (--kube-qps 50, burst 100), alone on it.
		{"kube-qps=50", 50, 100, 4},
		{"import-qps=200", 200, 400, 4},
		{"import-qps=500,workers=4", 500, 1000, 4},
		{"import-qps=1000,workers=4", 1000, 2000, 4},
		{"import-qps=1000,workers=16", 1000, 2000, 16},
		// The defaults: --import-qps 500, --import-burst 1000, 16 workers.
		{"defaults", 0, 0, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			t := b
			c := kubetest.Start(t, 1)[0]
			for i := range namespaces {
				createNamespace(t, c, fmt.Sprintf("bench-%02d", i))
			}
			run := func() (*rig, time.Duration) {
				start := time.Now()
				r := runImports(t, c, nil, func(cfg *rigConfig) {
					cfg.clients.ImportQPS, cfg.clients.ImportBurst, cfg.wb.ImportWorkers = float32(tc.qps), tc.burst, tc.workers
				})
				r.send(set...)
				r.awaitSyncedWithin(t, 15*time.Minute, keys...)
				return r, time.Since(start)
			}
			var first, second time.Duration
			var writes, rewrites float64
			for range b.N { // -benchtime 1x: once
				r, d := run()
				first, writes = d, r.writes(t)
				r.stop()
				again, d := run()
				second, rewrites = d, again.writes(t)
				again.stop()
			}
			b.ReportMetric(first.Seconds(), "s/converge")
			b.ReportMetric(writes/first.Seconds(), "writes/s")
			b.ReportMetric(second.Seconds(), "s/restart")
			b.ReportMetric(rewrites, "restart-writes")
			t.Logf("%d imports: converged in %v (%.0f writes, %.0f/s); restarted: nothing left to write after %v (%.0f writes)",
				services, first.Round(100*time.Millisecond), writes, writes/first.Seconds(), second.Round(100*time.Millisecond), rewrites)
			if rewrites != 0 {
				t.Errorf("the restarted writer sent %v writes, want none", rewrites)
			}
		})
	}
}

// awaitSyncedWithin is awaitSynced with a deadline of its own.
func (r *rig) awaitSyncedWithin(t testing.TB, limit time.Duration, keys ...string) {
	t.Helper()
	synced := func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		done := 0
		for _, k := range keys {
			if r.syncOK[k] > 0 {
				done++
			}
		}
		return done == len(keys), fmt.Sprintf("%d of %d imports synced within %v", done, len(keys), limit)
	}
	if !testwait.Within(limit, synced) {
		_, state := synced()
		t.Fatal(state)
	}
}
