//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/hub/debug"
)

// The process tests run the real meshfed binary: a hub and spokes as
// separate processes on loopback, killed and restarted as an operator's
// cluster would do it.

var (
	buildOnce sync.Once
	binPath   string
	errBuild  error
)

// meshfedBinary builds cmd/meshfed once per test run, into the
// repository's git-ignored cache.
func meshfedBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", ".cache", "e2e"))
		if err != nil {
			errBuild = err
			return
		}
		binPath = filepath.Join(dir, "meshfed")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, "github.com/meshfed/meshfed/cmd/meshfed").CombinedOutput()
		if err != nil {
			errBuild = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if errBuild != nil {
		t.Fatal(errBuild)
	}
	return binPath
}

// process is a running meshfed command.
type process struct {
	t      *testing.T
	name   string
	args   []string
	log    string
	cmd    *exec.Cmd
	exited chan error
}

// startProcess runs meshfed with args until the test ends; its output goes
// to a file shown when the test fails.
func startProcess(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{t: t, name: name, args: args, log: filepath.Join(t.TempDir(), name+".log")}
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.tail())
		}
	})
	return p
}

func (p *process) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	p.cmd = exec.Command(meshfedBinary(p.t), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan<- error) { exited <- cmd.Wait() }(p.cmd, p.exited)
}

// kill SIGKILLs the process and waits for it: nothing it would do on a
// clean stop happens.
func (p *process) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.exited
	var exit *exec.ExitError
	killed := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled()
	if err != nil && !killed {
		p.t.Errorf("%s: %v", p.name, err)
	}
	p.cmd = nil
}

// restart starts the process again with the same arguments.
func (p *process) restart() {
	p.t.Helper()
	p.kill()
	p.start()
}

func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

// procHub is a hub process and its addresses.
type procHub struct {
	*process
	federation, xds, debug string
}

func startProcHub(t *testing.T, extra ...string) *procHub {
	t.Helper()
	h := &procHub{federation: freeAddr(t), xds: freeAddr(t), debug: freeAddr(t)}
	args := append([]string{
		"hub", "--insecure", "--id", "hub-" + t.Name(),
		"--federation-addr", h.federation, "--xds-addr", h.xds, "--debug-addr", h.debug,
	}, extra...)
	h.process = startProcess(t, "hub", args...)
	return h
}

// clusters reads /debug/clusters; it returns nil while the hub does not
// answer.
func (h *procHub) clusters(ctx context.Context) []clusterRow {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.debug+"/debug/clusters", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	var body debug.ClustersResponse
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	out := make([]clusterRow, 0, len(body.Clusters))
	for _, c := range body.Clusters {
		out = append(out, clusterRow{
			id: string(c.ID), state: c.State.String(), connected: c.Connected, session: c.Session, version: c.ShardVersion,
			network: c.Network, gateways: c.Gateways, refusals: c.PolicyRefusals, nackReason: c.LastNackReason,
			peer: c.Peer, supersessions: c.Supersessions, duplicateRefusals: c.DuplicateRefusals, duplicate: c.Duplicate,
		})
	}
	return out
}

type clusterRow struct {
	id, state  string
	connected  bool
	session    string
	version    uint64
	network    string
	gateways   int
	refusals   uint64 // updates the cluster policy refused
	nackReason string
	peer       string
	// supersessions, duplicateRefusals and duplicate: a second spoke.
	supersessions, duplicateRefusals uint64
	duplicate                        string
}

// waitUp waits until the hub answers on its debug address (it binds
// every listener before it serves any).
func (h *procHub) waitUp(t *testing.T) {
	t.Helper()
	if !pollUntil(30*time.Second, func() bool { return h.clusters(t.Context()) != nil }) {
		t.Fatal("the hub never answered on its debug address")
	}
}

// waitCluster waits until cluster id's row satisfies cond.
func (h *procHub) waitCluster(t *testing.T, id string, timeout time.Duration, cond func(clusterRow) bool) clusterRow {
	t.Helper()
	var last []clusterRow
	ok := pollUntil(timeout, func() bool {
		last = h.clusters(t.Context())
		for _, c := range last {
			if c.id == id && cond(c) {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("cluster %s: never as wanted; last /debug/clusters: %+v", id, last)
	}
	for _, c := range last {
		if c.id == id {
			return c
		}
	}
	return clusterRow{}
}

// httpStatusOf is httpGet's status.
func httpStatusOf(ctx context.Context, url string) int {
	code, _ := httpGet(ctx, url)
	return code
}

// procSpoke is a spoke process federating a directory of manifests.
type procSpoke struct {
	*process
	dir string
}

// startProcSpoke runs a spoke of cluster id that dials hubAddr.
func startProcSpoke(t *testing.T, hubAddr, id, network string, manifests string, extra ...string) *procSpoke {
	t.Helper()
	dir := t.TempDir()
	s := &procSpoke{dir: dir}
	s.write(t, manifests)
	args := append([]string{
		"spoke", "--insecure", "--cluster-id", id, "--network", network, "--hub", hubAddr, "--manifests", dir,
	}, extra...)
	s.process = startProcess(t, "spoke-"+id, args...)
	return s
}

// write replaces the spoke's manifests (the file source follows them).
func (s *procSpoke) write(t *testing.T, manifests string) {
	t.Helper()
	tmp := filepath.Join(s.dir, ".echo.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "echo.yaml")); err != nil {
		t.Fatal(err)
	}
}

// echoManifests is demo/echo exported by a cluster whose pods run on one
// node of region r1 and the given zone, one per backend.
func echoManifests(zone string, backends ...backend) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Node
metadata:
  name: node-%[1]s
  labels:
    topology.kubernetes.io/region: r1
    topology.kubernetes.io/zone: %[1]s
---
apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: demo
  labels:
    meshfed.io/export: "true"
spec:
  type: ClusterIP
  clusterIP: 10.11.0.10
  ports:
    - name: grpc
      port: 8080
      targetPort: %[2]d
      protocol: TCP
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: demo
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
  - name: grpc
    port: %[2]d
    protocol: TCP
endpoints:
`, zone, backends[0].port)
	for _, be := range backends {
		fmt.Fprintf(&b, `  - addresses: [%q]
    conditions: {ready: true, serving: true}
    nodeName: node-%s
    zone: %s
`, be.addr, zone, zone)
	}
	return b.String()
}

// startEchoClusters starts a spoke process for each cluster of ids, each
// federating demo/echo with one endpoint, 127.0.<subnet>.<i+1> for the
// i-th, on network n1, and waits until h has every cluster's shard. It
// returns the endpoints, in order.
func startEchoClusters(t *testing.T, h *procHub, subnet int, ids ...string) []string {
	t.Helper()
	var want []string
	for i, id := range ids {
		ip := fmt.Sprintf("127.0.%d.%d", subnet, i+1)
		want = append(want, ip)
		startProcSpoke(t, h.federation, id, "n1", echoManifests("z-"+id, backend{addr: ip, port: 8080}))
	}
	for _, id := range ids {
		h.waitCluster(t, id, time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
	}
	return want
}

// edsWatch is a delta ADS stream subscribed to demo/echo's assignment, as
// a proxy of network n1 in region r1, zone z-east.
type edsWatch struct {
	t *testing.T
	d *deltaStream
}

func watchEDS(t *testing.T, xdsAddr string) *edsWatch {
	t.Helper()
	d := openDelta(t, xdsAddr)
	d.send(edsSubscription("watcher"))
	return &edsWatch{t: t, d: d}
}

// edsSubscription is the first request of a proxy in east's zone that
// watches echo's endpoints.
func edsSubscription(nodeID string) *discovery.DeltaDiscoveryRequest {
	md, _ := structpb.NewStruct(map[string]any{"CLUSTER_ID": "east", "NETWORK": "n1"})
	return &discovery.DeltaDiscoveryRequest{
		Node:                   &core.Node{Id: nodeID, Metadata: md, Locality: &core.Locality{Region: "r1", Zone: "z-east"}},
		TypeUrl:                resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{echoCluster},
	}
}

// endpointSet returns an assignment's addresses, every priority's, sorted.
func endpointSet(a map[uint32][]string) []string {
	var out []string
	for _, addrs := range a {
		out = append(out, addrs...)
	}
	slices.Sort(out)
	return out
}

// decodeEDS returns a response's assignments as priority → addresses.
func decodeEDS(r *discovery.DeltaDiscoveryResponse) map[uint32][]string {
	out := map[uint32][]string{}
	for _, res := range r.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if res.GetResource().UnmarshalTo(&cla) != nil {
			continue
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				out[l.GetPriority()] = append(out[l.GetPriority()], e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
	}
	return out
}

// until returns the first assignment that satisfies cond, and how many
// came before it.
func (w *edsWatch) until(what string, timeout time.Duration, cond func(map[uint32][]string) bool) (got map[uint32][]string, before int) {
	w.t.Helper()
	type result struct {
		got    map[uint32][]string
		before int
	}
	done := make(chan result, 1)
	go func() {
		n := 0
		for {
			r, err := w.d.s.Recv()
			if err != nil {
				done <- result{before: -1}
				return
			}
			_ = w.d.s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
			got := decodeEDS(r)
			if cond(got) {
				done <- result{got, n}
				return
			}
			n++
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.before < 0 {
			w.t.Fatalf("%s: the xDS stream ended", what)
		}
		return r.got, r.before
	case <-timer.C:
		w.t.Fatalf("%s: no such assignment within %v", what, timeout)
		return nil, 0
	}
}

// TestProcessClusterLease: a SIGKILLed spoke's cluster is served at full
// priority for --stale-after, after every live cluster once stale, and
// not at all once withdrawn; a spoke restarted within the grace costs
// proxies no push at all; one back after withdrawal is served again.
func TestProcessClusterLease(t *testing.T) {
	const staleAfter, withdrawAfter = 2 * time.Second, 5 * time.Second
	h := startProcHub(t, "--stale-after", staleAfter.String(), "--withdraw-after", withdrawAfter.String(),
		"--xds-warmup", "3s", "--xds-warmup-quiet", "200ms")
	eastPod, westPod := startBackend(t, "127.0.3.1", "east"), startBackend(t, "127.0.3.2", "west")
	east := startProcSpoke(t, h.federation, "east", "n1", echoManifests("z-east", eastPod))
	west := startProcSpoke(t, h.federation, "west", "n1", echoManifests("z-west", westPod))
	h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.version > 0 })
	h.waitCluster(t, "west", time.Minute, func(c clusterRow) bool { return c.version > 0 })

	client := xdsClient(t, h.xds, "client-east", "east", "n1", "r1", "z-east")
	eventually(t, client, "east") // same zone first
	w := watchEDS(t, h.xds)
	w.until("both clusters live", 30*time.Second, func(a map[uint32][]string) bool {
		return slices.Equal(a[0], []string{"127.0.3.1"}) && slices.Equal(a[1], []string{"127.0.3.2"})
	})

	// A spoke restarted within the grace: no EDS push. The first push
	// after it is the one a later change in west causes.
	east.restart()
	h.waitCluster(t, "east", 30*time.Second, func(c clusterRow) bool { return c.connected && c.version > 0 })
	west.write(t, echoManifests("z-west", westPod, backend{addr: "127.0.3.3", port: westPod.port}))
	_, before := w.until("west's new endpoint", 30*time.Second, func(a map[uint32][]string) bool { return len(a[1]) == 2 })
	if before != 0 {
		t.Errorf("%d EDS pushes while east's spoke restarted with nothing changed; want 0", before)
	}
	west.write(t, echoManifests("z-west", westPod))
	w.until("west back to one endpoint", 30*time.Second, func(a map[uint32][]string) bool { return len(a[1]) == 1 })

	// SIGKILL east's spoke: its pods still run, the hub just stops hearing.
	killed := time.Now()
	east.kill()
	got, _ := w.until("east stale", withdrawAfter, func(a map[uint32][]string) bool {
		return slices.Equal(a[0], []string{"127.0.3.2"})
	})
	stale := time.Since(killed)
	if !slices.Equal(got[1], []string{"127.0.3.1"}) {
		t.Errorf("stale east's endpoint: %v; want it after west's, at priority 1", got)
	}
	if stale < staleAfter {
		t.Errorf("east demoted %v after its spoke died, before --stale-after %v", stale, staleAfter)
	}
	eventually(t, client, "west")
	h.waitCluster(t, "east", time.Second, func(c clusterRow) bool { return c.state == "stale" })

	w.until("east withdrawn", 2*withdrawAfter, func(a map[uint32][]string) bool {
		return len(a) == 1 && slices.Equal(a[0], []string{"127.0.3.2"})
	})
	withdrawn := time.Since(killed)
	h.waitCluster(t, "east", time.Second, func(c clusterRow) bool { return c.state == "withdrawn" })
	t.Logf("spoke SIGKILL → proxy sees east stale after %v (--stale-after %v), withdrawn after %v (--withdraw-after %v)",
		stale.Round(time.Millisecond), staleAfter, withdrawn.Round(time.Millisecond), withdrawAfter)

	east.start()
	w.until("east back", 30*time.Second, func(a map[uint32][]string) bool {
		return slices.Equal(a[0], []string{"127.0.3.1"}) && slices.Equal(a[1], []string{"127.0.3.2"})
	})
	eventually(t, client, "east")
}

// TestProcessHubRestartNeverPartial: a hub SIGKILLed and restarted after
// two seconds down (three times, each after the spokes' streams had been
// up for a while) serves its first proxy response only once every member
// of the clusterset is back, although the spokes return one by one (the
// first spoke back names the others).
func TestProcessHubRestartNeverPartial(t *testing.T) {
	// The warm-up's limit is what lets a hub serve a partial clusterset:
	// keep it well above the spokes' reconnect backoff after two seconds
	// of failed dials (up to about 4 s, jittered), on a loaded machine.
	h := startProcHub(t, "--xds-warmup", "15s", "--xds-warmup-quiet", "100ms")
	want := startEchoClusters(t, h, 3, "east", "west", "north")
	w := watchEDS(t, h.xds)
	w.until("every cluster", 30*time.Second, func(a map[uint32][]string) bool { return slices.Equal(endpointSet(a), want) })
	start := time.Now()
	for round := range 3 {
		// A hub that restarts once in a while, not one that drops every
		// stream within seconds: a spoke backs off from that (its streams
		// must last 10 s to count as healthy: healthySession in spoke/uplink).
		up := time.NewTimer(11*time.Second - time.Since(start))
		<-up.C
		h.kill()
		down := time.NewTimer(2 * time.Second)
		<-down.C
		start = time.Now()
		h.start()
		h.waitUp(t)
		w := watchEDS(t, h.xds)
		first, _ := w.until(fmt.Sprintf("round %d: a response", round), 30*time.Second, func(map[uint32][]string) bool { return true })
		if got := endpointSet(first); !slices.Equal(got, want) {
			t.Errorf("round %d: the restarted hub's first response holds %v; want every cluster's %v", round, got, want)
		}
		t.Logf("round %d: first response %v after the restart", round, time.Since(start).Round(time.Millisecond))
	}
}
