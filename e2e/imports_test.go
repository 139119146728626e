//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/hub/clustersetip"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/uplink"
)

// startImportHub runs a hub replica serving federation on loopback,
// without xDS.
func startImportHub(t *testing.T, id, cidr string) *hubRun {
	t.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure, cfg.ID = true, id
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "", ""
	cfg.XDSWarmUp, cfg.XDSWarmUpQuiet = 5*time.Second, 100*time.Millisecond
	cfg.ClustersetCIDR = cidr
	return runHub(t, cfg)
}

// importingSpoke is a spoke's federation side with an imports store, and
// a writer that holds in its "cluster" exactly what the preferred replica
// says: what a real cluster reports once the spoke has written it.
type importingSpoke struct {
	id, network string
	tracker     *shard.Tracker
	store       *imports.Store

	mu       sync.Mutex
	services []*federationpb.Service
}

func newImportingSpoke(t *testing.T, id, network string, services []*federationpb.Service) *importingSpoke {
	t.Helper()
	s := &importingSpoke{id: id, network: network, tracker: shard.NewTracker(), store: imports.NewStore(), services: services}
	s.write()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.tracker.AnswerResyncs(ctx, s.write) })
	wg.Go(func() {
		held := s.store.Held()
		for {
			set, changed := s.store.Current()
			if set != nil {
				for _, im := range set.Imports {
					held.Set(&federationpb.HeldImport{Namespace: im.GetNamespace(), Name: im.GetName(), Ips: im.GetIps(), Clusters: im.GetClusters()})
				}
			}
			held.Synced()
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return s
}

// write writes the spoke's whole shard anew.
func (s *importingSpoke) write() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tracker.Update(time.Now(), true, func(w shard.Writer) {
		w.Reset()
		w.SetCluster(testCluster(s.id, s.network))
		for i, svc := range s.services {
			must(w.PutService(svc))
			must(w.SetEndpoints(federation.KeyOfService(svc), testEndpoints(svc.GetNamespace(), svc.GetName(), 2, 1000*len(s.id)+10*i)))
		}
	})
}

// export adds a service to the spoke's shard.
func (s *importingSpoke) export(svc *federationpb.Service) {
	s.mu.Lock()
	s.services = append(s.services, svc)
	s.mu.Unlock()
	s.write()
}

// connect streams the spoke's shard to a hub replica, with a link for the
// replica's imports.
func (s *importingSpoke) connect(t *testing.T, h *hubRun) {
	t.Helper()
	addr := h.FederationAddr().String()
	client := federationClient(t, addr)
	link := s.store.Link(addr)
	stream := s.tracker.Open()
	u := uplink.New(uplink.Config{ClusterID: s.id, Hub: addr, Imports: link, WritesImports: true, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
		stream, func(ctx context.Context) (uplink.Stream, error) { return client.Sync(ctx) }, testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = u.Run(ctx)
	}()
	closeLink := func() {
		cancel()
		<-done
		stream.Close()
		link.Close()
	}
	t.Cleanup(closeLink)
}

// awaitImport waits until the spoke's current set has key and cond holds
// for it.
func (s *importingSpoke) awaitImport(t *testing.T, key, what string, cond func(*federationpb.Import) bool) *federationpb.Import {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		set, changed := s.store.Current()
		if im, ok := set.Import(key); ok && cond(im) {
			return im
		}
		select {
		case <-deadline:
			im, _ := set.Import(key)
			t.Fatalf("%s: %s: %s: still %v", s.id, key, what, im)
		case <-changed:
		}
	}
}

func exportedAt(name string, at time.Time) *federationpb.Service {
	s := testService("demo", name)
	s.Export.Time = timestamppb.New(at)
	return s
}

func clustersetIPs(t *testing.T, h *hubRun, key string) []netip.Addr {
	t.Helper()
	s := h.Registry().Current()
	if _, ok := s.Service(key); !ok {
		t.Fatalf("hub %s has no %s", h.FederationAddr(), key)
	}
	return s.Import(key).ClustersetIPs
}

// Two replicas hand out the same ClusterSetIPs; a replica that starts
// anew learns them from what the clusters hold, even where its own
// derivation would give them to another import.
func TestImportsAcrossReplicasAndRestarts(t *testing.T) {
	const cidr = "10.99.0.0/29" // six addresses: hashes collide
	pools, err := clustersetip.ParsePools(cidr)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// young is exported first and gets its hash's address; old, exported
	// later but with an older ServiceExport, hashes to the same address. A
	// hub deriving from nothing would give it to old.
	young := exportedAt("young", t0)
	alone := func(name string, at time.Time) netip.Addr {
		r, _ := clustersetip.Assign(pools, []clustersetip.Import{{Key: "demo/" + name, Since: at, Families: []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4}}})
		return r["demo/"+name].IPs[0]
	}
	var oldName string
	for i := range 1000 {
		if n := fmt.Sprintf("old-%d", i); alone(n, t0.Add(-time.Hour)) == alone("young", t0) {
			oldName = n
			break
		}
	}
	if oldName == "" {
		t.Fatal("no name collides with young in the pool")
	}
	old := exportedAt(oldName, t0.Add(-time.Hour))

	a, b := startImportHub(t, "a", cidr), startImportHub(t, "b", cidr)
	east := newImportingSpoke(t, "east", "n1", []*federationpb.Service{young})
	west := newImportingSpoke(t, "west", "n1", []*federationpb.Service{young})
	for _, s := range []*importingSpoke{east, west} {
		s.connect(t, a)
		s.connect(t, b)
	}
	both := func(im *federationpb.Import) bool { return slices.Equal(im.GetClusters(), []string{"east", "west"}) }
	im := east.awaitImport(t, "demo/young", "exported by both", both)
	youngIP := im.GetIps()
	if len(youngIP) != 1 || youngIP[0] != alone("young", t0).String() {
		t.Fatalf("young's ClusterSetIPs %v, want its hash's %s", youngIP, alone("young", t0))
	}
	west.awaitImport(t, "demo/young", "the same IPs", func(im *federationpb.Import) bool { return slices.Equal(im.GetIps(), youngIP) })
	// Every member holds both exports: both are Ready.
	east.awaitImport(t, "demo/young", "ready everywhere", func(im *federationpb.Import) bool {
		return slices.Equal(im.GetReady(), []string{"east", "west"})
	})

	// West exports old as well: it gets another address.
	west.export(old)
	im = east.awaitImport(t, "demo/"+oldName, "imported", func(im *federationpb.Import) bool { return len(im.GetIps()) == 1 })
	oldIP := im.GetIps()
	if oldIP[0] == youngIP[0] {
		t.Fatalf("old and young share %s", oldIP[0])
	}
	for _, h := range []*hubRun{a, b} {
		if got := clustersetIPs(t, h, "demo/young"); got[0].String() != youngIP[0] {
			t.Errorf("hub %s gives young %v, want %v", h.FederationAddr(), got, youngIP)
		}
	}

	// A new replica (or a restarted one: it has no storage) learns the
	// addresses from the clusters.
	a.stop()
	c := startImportHub(t, "c", cidr)
	east.connect(t, c)
	west.connect(t, c)
	await(t, c.Registry(), "both imports exported by their clusters", func(s clusterset.Snapshot) bool {
		y, ok1 := s.Service("demo/young")
		o, ok2 := s.Service("demo/" + oldName)
		return ok1 && ok2 && len(y.Clusters) == 2 && len(o.Clusters) == 1 && len(s.Import(y.Key).ClustersetIPs) == 1 && len(s.Import(o.Key).ClustersetIPs) == 1
	})
	if got := clustersetIPs(t, c, "demo/young"); got[0].String() != youngIP[0] {
		t.Errorf("the new replica gives young %v, want %v", got, youngIP)
	}
	if got := clustersetIPs(t, c, "demo/"+oldName); got[0].String() != oldIP[0] {
		t.Errorf("the new replica gives %s %v, want %v", oldName, got, oldIP)
	}
	if got := c.Registry().ClustersetIPCollisions(); len(got) != 0 {
		t.Errorf("collisions %v", got)
	}
}
