//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshfed/meshfed/internal/tcpproxy"
)

// startVIP stands for an ordinary Service in front of hub replicas: it
// forwards each connection to the first replica that is ready (/readyz)
// and accepts it, as kube-proxy does with the Service's ready endpoints.
// With none ready, it closes the connection.
func startVIP(t *testing.T, hubs ...*procHub) string {
	t.Helper()
	// As a Service gets its endpoints once the pods are ready: a proxy
	// that dialled a Service with none would be in gRPC's reconnect
	// backoff (up to two minutes) when the first replica turns ready,
	// and the tests would measure that.
	if !pollUntil(2*time.Minute, func() bool {
		for _, h := range hubs {
			if !h.ready(t.Context()) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the hub replicas never turned ready")
	}
	lis := listenLoopback(t)
	runInBackground(t, func(ctx context.Context) error {
		stop := context.AfterFunc(ctx, func() { _ = lis.Close() })
		defer stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			c, err := lis.Accept()
			if err != nil {
				return nil //nolint:nilerr // the listener closes when the test ends
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ready []string
				for _, h := range hubs {
					if h.ready(ctx) {
						ready = append(ready, h.xds)
					}
				}
				tcpproxy.Forward(ctx, c, ready...)
			}()
		}
	})
	return lis.Addr().String()
}

// ready reports whether the hub answers 200 on /readyz.
func (h *procHub) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return httpStatusOf(ctx, "http://"+h.debug+"/readyz") == http.StatusOK
}

// edsResponse is one EDS response a watcher received.
type edsResponse struct {
	stream int // the watcher's stream it came on, from 1
	at     time.Time
	addrs  []string // every endpoint, sorted
}

// edsRecorder watches EDS through addr and reconnects whenever its
// stream ends, as a proxy does, recording every response.
type edsRecorder struct {
	id        int64
	seen      func(edsResponse) // called with each response, if set
	mu        sync.Mutex
	responses []edsResponse
}

var recorders atomic.Int64

func recordEDS(t *testing.T, addr string) *edsRecorder {
	t.Helper()
	return recordEDSTo(t, addr, nil)
}

// recordEDSTo is recordEDS that also hands each response to seen, on the
// recorder's goroutine.
func recordEDSTo(t *testing.T, addr string, seen func(edsResponse)) *edsRecorder {
	t.Helper()
	r := &edsRecorder{id: recorders.Add(1), seen: seen}
	ads := adsClient(t, addr) // one channel, as a proxy keeps
	runInBackground(t, func(ctx context.Context) error {
		for stream := 1; ctx.Err() == nil; stream++ {
			r.watch(ctx, ads, stream)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond): // a proxy's reconnect backoff
			}
		}
		return nil
	})
	return r
}

func (r *edsRecorder) watch(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient, stream int) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return
	}
	if s.Send(edsSubscription(fmt.Sprintf("recorder-%d-%d", r.id, stream))) != nil {
		return
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return
		}
		_ = s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
		got := edsResponse{stream: stream, at: time.Now(), addrs: endpointSet(decodeEDS(resp))}
		r.mu.Lock()
		r.responses = append(r.responses, got)
		r.mu.Unlock()
		if r.seen != nil {
			r.seen(got)
		}
	}
}

func (r *edsRecorder) all() []edsResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.responses)
}

// firstEDS returns the first EDS response of a new stream to addr: its
// resources' names and versions, and its endpoints.
func firstEDS(t *testing.T, addr string) (versions map[string]string, addrs []string) {
	t.Helper()
	d := openDelta(t, addr)
	d.send(edsSubscription("compare"))
	resp := d.recv()
	versions = map[string]string{}
	for _, res := range resp.GetResources() {
		versions[res.GetName()] = res.GetVersion()
	}
	_ = d.s.CloseSend()
	return versions, endpointSet(decodeEDS(resp))
}

// TestProcessTwoReplicas: spokes stream to both hub replicas; both serve
// the same resources at the same versions; with one SIGKILLed, proxies
// behind the Service reconnect to the other, which has the whole
// clusterset at once: no response lacks a cluster, and changes keep
// flowing. The replica restarted serves the same again.
func TestProcessTwoReplicas(t *testing.T) {
	flags := []string{"--xds-warmup", "8s", "--xds-warmup-quiet", "100ms"}
	a := startProcHub(t, append(flags, "--id", "hub-a")...)
	b := startProcHub(t, append(flags, "--id", "hub-b")...)
	ids := []string{"east", "west", "north"}
	spokes := map[string]*procSpoke{}
	var want []string
	for i, id := range ids {
		pod := startBackend(t, fmt.Sprintf("127.0.3.%d", i+1), id)
		want = append(want, pod.addr)
		spokes[id] = startProcSpoke(t, a.federation+","+b.federation, id, "n1", echoManifests("z-"+id, pod))
	}
	slices.Sort(want)
	for _, h := range []*procHub{a, b} {
		for _, id := range ids {
			h.waitCluster(t, id, time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
		}
	}
	same := func(when string) {
		t.Helper()
		va, addrsA := firstEDS(t, a.xds)
		vb, addrsB := firstEDS(t, b.xds)
		if !slices.Equal(addrsA, want) || !slices.Equal(addrsB, want) {
			t.Errorf("%s: replicas serve %v and %v, want %v from each", when, addrsA, addrsB, want)
		}
		if fmt.Sprint(va) != fmt.Sprint(vb) {
			t.Errorf("%s: resource versions differ between replicas: %v and %v", when, va, vb)
		}
	}
	same("both up")

	vip := startVIP(t, a, b)
	client := xdsClient(t, vip, "client-east", "east", "n1", "r1", "z-east")
	eventually(t, client, "east")
	rec := recordEDS(t, vip)
	if !pollUntil(30*time.Second, func() bool { return len(rec.all()) > 0 }) {
		t.Fatal("the recorder got no response through the Service")
	}

	killed := time.Now()
	a.kill()
	if !pollUntil(30*time.Second, func() bool {
		got := rec.all()
		return got[len(got)-1].stream > 1
	}) {
		t.Fatal("the recorder never reconnected to the other replica")
	}
	got := rec.all()
	var failover time.Duration
	for _, r := range got {
		if r.stream > 1 {
			failover = r.at.Sub(killed)
			break
		}
	}

	// Changes keep flowing through the replica left.
	moved := startBackend(t, "127.0.3.4", "east-2")
	spokes["east"].write(t, echoManifests("z-east", moved))
	eventually(t, client, "east-2")
	want = []string{"127.0.3.2", "127.0.3.3", "127.0.3.4"}
	if !pollUntil(30*time.Second, func() bool {
		got := rec.all()
		return slices.Equal(got[len(got)-1].addrs, want)
	}) {
		t.Fatalf("the recorder never saw east's new endpoint: %+v", rec.all())
	}
	partial := 0
	for _, r := range rec.all() {
		if len(r.addrs) != len(ids) {
			partial++
			t.Errorf("a response on stream %d lacks a cluster: %v", r.stream, r.addrs)
		}
	}
	t.Logf("replica SIGKILL → the proxy is served by the other replica after %v; %d responses, %d partial",
		failover.Round(time.Millisecond), len(rec.all()), partial)

	// The killed replica comes back with every member and the same view.
	a.start()
	a.waitUp(t)
	for _, id := range ids {
		a.waitCluster(t, id, time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
	}
	same("after the restart")
}
