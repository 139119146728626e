//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/internal/kubetest"
)

// The fault matrix's hub kills at the worst moments: while a spoke's full
// state is half-way to the hub, and while the hub is half-way through a
// push to its proxies; then a storm of proxies reconnecting at once.

// bulkManifests is n exported services of cluster id with size endpoints
// each (beside echo), so that its full state spans many chunks.
func bulkManifests(id string, n, size int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata:
  name: bulk-%[2]d
  namespace: demo
  labels:
    meshfed.io/export: "true"
spec:
  type: ClusterIP
  clusterIP: 10.12.%[3]d.%[4]d
  ports:
    - name: http
      port: 80
      protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: bulk-%[2]d-1
  namespace: demo
  labels:
    kubernetes.io/service-name: bulk-%[2]d
addressType: IPv4
ports:
  - name: http
    port: 80
    protocol: TCP
endpoints:
`, id, i, i/250, 1+i%250)
		for j := range size {
			fmt.Fprintf(&b, "  - addresses: [\"10.%d.%d.%d\"]\n    conditions: {ready: true}\n    nodeName: node-z-%s\n", 100+i/200, i%200, j+1, id)
		}
	}
	return b.String()
}

// partialResponses returns the responses whose endpoints are not exactly
// one of the sets in valid.
func partialResponses(rs []edsResponse, valid ...[]string) []edsResponse {
	var out []edsResponse
	for _, r := range rs {
		if !slices.ContainsFunc(valid, func(v []string) bool { return slices.Equal(r.addrs, v) }) {
			out = append(out, r)
		}
	}
	return out
}

// TestProcessHubKilledMidInitialSync: a hub replica is SIGKILLed while a
// spoke's full state is half-way to it (the restarted replica has some of
// its chunks), and restarted. No proxy, whether it reaches the replicas
// through the Service or that replica directly, is ever sent a response
// that lacks a member; the replica serves the whole clusterset once the
// spoke's full state has arrived, the same view as the replica that never
// stopped.
func TestProcessHubKilledMidInitialSync(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			flags := []string{"--xds-warmup", "8s", "--xds-warmup-quiet", "100ms"}
			var hubs []*procHub
			for i := range replicas {
				hubs = append(hubs, startProcHub(t, append(flags, "--id", fmt.Sprintf("hub-%d", i))...))
			}
			victim := hubs[0]
			cut := startPartition(t, victim.federation)
			ids := []string{"east", "west", "north"}
			var want []string
			for i, id := range ids {
				ip := fmt.Sprintf("127.0.4.%d", i+1)
				want = append(want, ip)
				addrs := []string{cut.addr()}
				manifests := echoManifests("z-"+id, backend{addr: ip, port: 8080})
				var extra []string
				if id == "east" {
					// East's full state is 60 chunks or so; the others go
					// straight to the victim.
					manifests += bulkManifests(id, 40, 30)
					extra = []string{"--max-message-bytes", "16384"}
				} else {
					addrs[0] = victim.federation
				}
				for _, h := range hubs[1:] {
					addrs = append(addrs, h.federation)
				}
				startProcSpoke(t, strings.Join(addrs, ","), id, "n1", manifests, extra...)
			}
			for _, h := range hubs {
				for _, id := range ids {
					h.waitCluster(t, id, time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
				}
			}
			viaService := recordEDS(t, startVIP(t, hubs...))
			direct := recordEDS(t, victim.xds)
			streamAtKill := map[*edsRecorder]int{}
			for _, r := range []*edsRecorder{viaService, direct} {
				if !pollUntil(time.Minute, func() bool { rs := r.all(); return len(rs) > 0 && slices.Equal(rs[len(rs)-1].addrs, want) }) {
					t.Fatalf("a proxy never got the whole clusterset: %+v", r.all())
				}
				rs := r.all()
				streamAtKill[r] = rs[len(rs)-1].stream
			}

			// The victim restarts; east's full state to it stops after
			// 64 KiB, a few of its chunks.
			cutNow := cut.cutAfter(64 << 10)
			victim.kill()
			victim.start()
			victim.waitUp(t)
			select {
			case <-cutNow:
			case <-time.After(time.Minute):
				t.Fatal("east's full state never reached the restarted replica")
			}
			for _, id := range ids[1:] {
				victim.waitCluster(t, id, time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
			}
			if r := victim.clusterRow(t, "east"); r.version != 0 {
				t.Fatalf("east synced to the victim through a cut stream: %+v", r)
			}
			if victim.ready(t.Context()) {
				t.Error("the victim reports ready with east's full state half-way")
			}

			// SIGKILLed mid-way through east's full state.
			victim.kill()
			cut.restore()
			victim.start()
			victim.waitUp(t)
			for _, id := range ids {
				victim.waitCluster(t, id, time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
			}
			for name, r := range map[string]*edsRecorder{"through the Service": viaService, "on the victim": direct} {
				if !pollUntil(time.Minute, func() bool {
					rs := r.all()
					return rs[len(rs)-1].stream > streamAtKill[r] && slices.Equal(rs[len(rs)-1].addrs, want)
				}) {
					t.Errorf("the proxy %s never got the whole clusterset on a new stream: %+v", name, r.all())
				}
				rs := r.all()
				for _, p := range partialResponses(rs, want) {
					t.Errorf("the proxy %s was sent %v on stream %d: not every member's endpoint", name, p.addrs, p.stream)
				}
				t.Logf("the proxy %s: %d responses over %d streams", name, len(rs), rs[len(rs)-1].stream)
			}
			if replicas > 1 {
				va, addrsA := firstEDS(t, victim.xds)
				vb, addrsB := firstEDS(t, hubs[1].xds)
				if !slices.Equal(addrsA, want) || fmt.Sprint(va) != fmt.Sprint(vb) {
					t.Errorf("the restarted replica serves %v at %v, the other %v at %v", addrsA, va, addrsB, vb)
				}
			}
		})
	}
}

// TestProcessHubKilledMidPush: a hub replica is SIGKILLed as soon as the
// first of 200 proxies has the new version of an 800-endpoint assignment,
// while the push to the others is under way. Every proxy ends with the
// new version, from the restarted hub or from the other replica; none is
// ever sent a mix, a partial set, or the old version again once it had
// the new one.
func TestProcessHubKilledMidPush(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			flags := []string{"--xds-warmup", "8s", "--xds-warmup-quiet", "100ms"}
			var hubs []*procHub
			var feds []string
			for i := range replicas {
				h := startProcHub(t, append(flags, "--id", fmt.Sprintf("hub-%d", i))...)
				hubs, feds = append(hubs, h), append(feds, h.federation)
			}
			victim := hubs[0]
			endpoints := func(first int) []backend {
				var bs []backend
				for i := first; i < first+800; i++ {
					bs = append(bs, backend{addr: fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250), port: 8080})
				}
				return bs
			}
			set := func(bs []backend, west string) []string {
				out := []string{west}
				for _, b := range bs {
					out = append(out, b.addr)
				}
				slices.Sort(out)
				return out
			}
			oldEast, newEast := endpoints(0), endpoints(400)
			east := startProcSpoke(t, strings.Join(feds, ","), "east", "n1", echoManifests("z-east", oldEast...))
			startProcSpoke(t, strings.Join(feds, ","), "west", "n1", echoManifests("z-west", backend{addr: "127.2.0.1", port: 8080}))
			before, after := set(oldEast, "127.2.0.1"), set(newEast, "127.2.0.1")
			for _, h := range hubs {
				for _, id := range []string{"east", "west"} {
					h.waitCluster(t, id, time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
				}
			}

			vip := startVIP(t, hubs...)
			var once sync.Once
			firstNew := make(chan struct{})
			proxies := make([]*edsRecorder, 200)
			for i := range proxies {
				proxies[i] = recordEDSTo(t, vip, func(r edsResponse) {
					if slices.Equal(r.addrs, after) {
						once.Do(func() { close(firstNew) })
					}
				})
			}
			has := func(r *edsRecorder, want []string) bool {
				rs := r.all()
				return len(rs) > 0 && slices.Equal(rs[len(rs)-1].addrs, want)
			}
			if !pollUntil(2*time.Minute, func() bool {
				return !slices.ContainsFunc(proxies, func(r *edsRecorder) bool { return !has(r, before) })
			}) {
				t.Fatal("the proxies never all got the first version")
			}

			east.write(t, echoManifests("z-east", newEast...))
			select {
			case <-firstNew:
			case <-time.After(time.Minute):
				t.Fatal("no proxy got the new version")
			}
			victim.kill()
			pushed := 0
			for _, r := range proxies {
				if has(r, after) {
					pushed++
				}
			}
			t.Logf("SIGKILLed with %d of %d proxies holding the new version", pushed, len(proxies))
			if replicas == 1 {
				victim.start()
			}
			start := time.Now()
			if !pollUntil(2*time.Minute, func() bool {
				return !slices.ContainsFunc(proxies, func(r *edsRecorder) bool { return !has(r, after) })
			}) {
				n := 0
				for _, r := range proxies {
					if has(r, after) {
						n++
					}
				}
				t.Fatalf("%d of %d proxies have the new version", n, len(proxies))
			}
			t.Logf("every proxy has the new version %v after the kill", time.Since(start).Round(time.Millisecond))
			for i, r := range proxies {
				rs := r.all()
				for _, p := range partialResponses(rs, before, after) {
					t.Errorf("proxy %d was sent %d endpoints on stream %d: neither version", i, len(p.addrs), p.stream)
				}
				if i := slices.IndexFunc(rs, func(r edsResponse) bool { return slices.Equal(r.addrs, after) }); i >= 0 {
					if j := slices.IndexFunc(rs[i:], func(r edsResponse) bool { return slices.Equal(r.addrs, before) }); j >= 0 {
						t.Errorf("proxy %d was sent the old version again on stream %d after the new one", i, rs[i+j].stream)
					}
				}
			}
		})
	}
}

// TestProcessReconnectStorm: 1,000 proxies lose a SIGKILLed hub at once
// and reconnect to it as it restarts; each one's first response on its
// new stream is the whole clusterset.
func TestProcessReconnectStorm(t *testing.T) {
	h := startProcHub(t, "--xds-warmup", "8s", "--xds-warmup-quiet", "100ms")
	want := startEchoClusters(t, h, 5, "east", "west", "north")
	proxies := make([]*edsRecorder, 1000)
	for i := range proxies {
		proxies[i] = recordEDS(t, h.xds)
	}
	synced := func(stream int) int {
		n := 0
		for _, r := range proxies {
			rs := r.all()
			if len(rs) > 0 && rs[len(rs)-1].stream >= stream && slices.Equal(rs[len(rs)-1].addrs, want) {
				n++
			}
		}
		return n
	}
	if !pollUntil(2*time.Minute, func() bool { return synced(1) == len(proxies) }) {
		t.Fatalf("%d of %d proxies got the clusterset", synced(1), len(proxies))
	}

	h.kill()
	start := time.Now()
	h.start()
	if !pollUntil(2*time.Minute, func() bool { return synced(2) == len(proxies) }) {
		t.Fatalf("%d of %d proxies got the clusterset back", synced(2), len(proxies))
	}
	t.Logf("%d proxies have the whole clusterset again %v after the hub restarted", len(proxies), time.Since(start).Round(time.Millisecond))
	for i, r := range proxies {
		for _, p := range partialResponses(r.all(), want) {
			t.Errorf("proxy %d was sent %v on stream %d", i, p.addrs, p.stream)
		}
	}
}

// TestProcessStuckProxies: two proxies subscribe to an 800-endpoint
// assignment and then never read nor acknowledge, one on a delta stream
// and one on a state-of-the-world stream, so that the hub's sends to them
// block once their flow-control windows are full (after a response or
// two). Proxies next to them get every change.
func TestProcessStuckProxies(t *testing.T) {
	h := startProcHub(t, "--xds-warmup", "8s", "--xds-warmup-quiet", "100ms")
	version := func(v int) ([]backend, []string) {
		var bs []backend
		var want []string
		for i := range 800 {
			addr := fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250)
			if i == 0 {
				addr = fmt.Sprintf("127.3.0.%d", 1+v)
			}
			bs, want = append(bs, backend{addr: addr, port: 8080}), append(want, addr)
		}
		slices.Sort(want)
		return bs, want
	}
	bs, want := version(0)
	east := startProcSpoke(t, h.federation, "east", "n1", echoManifests("z-east", bs...))
	h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })

	stuckDelta := openDelta(t, h.xds)
	stuckDelta.send(edsSubscription("stuck-delta"))
	stuckSotW, err := adsClient(t, h.xds).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stuckSotW.Send(&discovery.DiscoveryRequest{Node: edsSubscription("stuck-sotw").GetNode(), TypeUrl: resourcev3.EndpointType, ResourceNames: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}
	healthy := make([]*edsRecorder, 5)
	for i := range healthy {
		healthy[i] = recordEDS(t, h.xds)
	}
	for v := range 12 { // about 400 KiB to each stuck proxy: many windows' worth
		if v > 0 {
			bs, want = version(v)
			east.write(t, echoManifests("z-east", bs...))
		}
		if !pollUntil(time.Minute, func() bool {
			return !slices.ContainsFunc(healthy, func(r *edsRecorder) bool {
				rs := r.all()
				return len(rs) == 0 || !slices.Equal(rs[len(rs)-1].addrs, want)
			})
		}) {
			t.Fatalf("version %d never reached every healthy proxy next to the stuck ones", v)
		}
	}
}

// TestProcessKubeAPIServerDown: the kube-apiserver under a running spoke
// process goes away for a few seconds and comes back. The spoke keeps its
// cluster's last state at the hub meanwhile (its watches fail, its shard
// stays), so no proxy loses an endpoint, and it follows the changes made
// once the API server is back.
func TestProcessKubeAPIServerDown(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	kubeEcho(t, c, "z-east", "10.6.0.1", "10.6.0.2")
	h := startProcHub(t, "--xds-warmup", "8s", "--xds-warmup-quiet", "100ms")
	startProcess(t, "spoke-east", "spoke", "--insecure", "--cluster-id", "east", "--network", "n1",
		"--hub", h.federation, "--kubeconfig", c.Kubeconfig)
	h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
	both, one := []string{"10.6.0.1", "10.6.0.2"}, []string{"10.6.0.1"}
	rec := recordEDS(t, h.xds)
	last := func(want []string) func() bool {
		return func() bool { rs := rec.all(); return len(rs) > 0 && slices.Equal(rs[len(rs)-1].addrs, want) }
	}
	if !pollUntil(time.Minute, last(both)) {
		t.Fatalf("the proxy never got east's endpoints: %+v", rec.all())
	}

	c.StopAPIServer(t)
	down := time.NewTimer(3 * time.Second) // a few watch retries' worth
	<-down.C
	if r := h.clusterRow(t, "east"); !r.connected || r.state != "live" {
		t.Errorf("with its API server down, east at the hub is %+v; want connected and live", r)
	}
	c.StartAPIServer(t)

	slice, err := c.Client.DiscoveryV1().EndpointSlices("demo").Get(t.Context(), "echo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice.Endpoints = slice.Endpoints[:1]
	if _, err := c.Client.DiscoveryV1().EndpointSlices("demo").Update(t.Context(), slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !pollUntil(time.Minute, last(one)) {
		t.Fatalf("the proxy never saw the change made after the API server came back: %+v", rec.all())
	}
	for _, p := range partialResponses(rec.all(), both, one) {
		t.Errorf("the proxy was sent %v on stream %d", p.addrs, p.stream)
	}
}
