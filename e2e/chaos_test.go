//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	chaosFaults = flag.Int("chaos.faults", 8, "faults TestProcessChaos injects (make chaos runs many)")
	chaosSeed   = flag.Uint64("chaos.seed", 0, "TestProcessChaos's random seed (0: a new one, logged)")
)

// chaosCluster is one member cluster of the chaos run: its spoke, the
// partitions between it and each hub replica, and the endpoint its
// manifests publish (the ground truth).
type chaosCluster struct {
	id       string
	spoke    *procSpoke
	cuts     []*partition
	endpoint string
	moves    int
}

// TestProcessChaos injects random faults into two hub replicas and three
// spokes, real processes all: spoke SIGKILL and restart, hub replica
// SIGKILL and restart (also right after a change, while it pushes),
// partitions of a spoke from both replicas, and endpoint changes
// meanwhile. A proxy behind the Service records every
// response. After the last fault heals, every replica must serve the
// ground truth the spokes' manifests hold (nothing lost, nothing ghosted),
// and no recorded response may have lacked a member cluster.
func TestProcessChaos(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("chaos seed %d (-chaos.seed to replay), %d faults", seed, *chaosFaults)

	flags := []string{
		"--stale-after", "1s", "--withdraw-after", "0", "--keepalive-time", "1s", "--keepalive-timeout", "1s",
		"--xds-warmup", "30s", "--xds-warmup-quiet", "100ms",
	}
	hubs := []*procHub{startProcHub(t, append(flags, "--id", "hub-a")...), startProcHub(t, append(flags, "--id", "hub-b")...)}
	var clusters []*chaosCluster
	for i, id := range []string{"east", "west", "north"} {
		c := &chaosCluster{id: id, endpoint: fmt.Sprintf("127.0.%d.1", 10+i)}
		var addrs []string
		for _, h := range hubs {
			cut := startPartition(t, h.federation)
			c.cuts = append(c.cuts, cut)
			addrs = append(addrs, cut.addr())
		}
		c.spoke = startProcSpoke(t, strings.Join(addrs, ","), id, "n1", c.manifests(), "--keepalive-time", "1s")
		clusters = append(clusters, c)
	}
	for _, h := range hubs {
		for _, c := range clusters {
			h.waitCluster(t, c.id, time.Minute, func(r clusterRow) bool { return r.connected && r.version > 0 })
		}
	}
	rec := recordEDS(t, startVIP(t, hubs...))
	if !pollUntil(30*time.Second, func() bool { return len(rec.all()) > 0 }) {
		t.Fatal("the proxy got no response through the Service")
	}

	pause := func(maxMillis int) {
		<-time.After(time.Duration(rng.IntN(maxMillis)) * time.Millisecond)
	}
	counts := map[string]int{}
	for range *chaosFaults {
		c := clusters[rng.IntN(len(clusters))]
		switch fault := rng.IntN(5); fault {
		case 0:
			counts["spoke restart"]++
			c.spoke.kill()
			pause(1500)
			c.spoke.start()
		case 1:
			counts["hub replica restart"]++
			h := hubs[rng.IntN(len(hubs))]
			h.kill()
			pause(2000)
			h.start()
			h.waitUp(t)
		case 2:
			counts["spoke partitioned"]++
			for _, cut := range c.cuts {
				cut.blackhole()
			}
			pause(3000)
			for _, cut := range c.cuts {
				cut.restore()
			}
		case 3:
			counts["endpoint moved"]++
			c.moves++
			c.endpoint = fmt.Sprintf("127.0.%d.%d", 10+slices.Index(clusters, c), 1+c.moves)
			c.spoke.write(t, c.manifests())
		case 4:
			counts["hub replica killed mid-change"]++
			c.moves++
			c.endpoint = fmt.Sprintf("127.0.%d.%d", 10+slices.Index(clusters, c), 1+c.moves)
			c.spoke.write(t, c.manifests())
			h := hubs[rng.IntN(len(hubs))]
			h.kill()
			pause(2000)
			h.start()
			h.waitUp(t)
		}
		pause(500)
	}
	t.Logf("faults injected: %v", counts)

	var want []string
	for _, c := range clusters {
		want = append(want, c.endpoint)
	}
	slices.Sort(want)
	for i, h := range hubs {
		var got []string
		if !pollUntil(time.Minute, func() bool {
			for _, c := range clusters {
				if r := h.clusterRow(t, c.id); !r.connected || r.state != "live" {
					return false
				}
			}
			_, got = firstEDS(t, h.xds)
			return slices.Equal(got, want)
		}) {
			t.Errorf("replica %d serves %v after the faults healed, want the ground truth %v", i, got, want)
		}
	}
	if !pollUntil(time.Minute, func() bool {
		got := rec.all()
		return slices.Equal(got[len(got)-1].addrs, want)
	}) {
		t.Errorf("the proxy's last response holds %v, want %v", rec.all()[len(rec.all())-1].addrs, want)
	}
	responses := rec.all()
	for _, r := range responses {
		if len(r.addrs) != len(clusters) {
			t.Errorf("a response on stream %d at %v holds %v: not one endpoint per member cluster", r.stream, r.at.Format(time.StampMilli), r.addrs)
		}
	}
	t.Logf("%d responses over %d streams, none partial", len(responses), responses[len(responses)-1].stream)
}

func (c *chaosCluster) manifests() string {
	return echoManifests("z-"+c.id, backend{addr: c.endpoint, port: 8080})
}

// clusterRow returns the hub's row of cluster id (empty while the hub
// does not answer).
func (h *procHub) clusterRow(t *testing.T, id string) clusterRow {
	t.Helper()
	for _, r := range h.clusters(t.Context()) {
		if r.id == id {
			return r
		}
	}
	return clusterRow{}
}
