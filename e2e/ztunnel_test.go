//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"istio.io/istio/pkg/workloadapi"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/xds"
)

// ambientCluster publishes pods (as workloads behind demo/echo) of one cluster.
func (f *xdsFleet) ambientCluster(t *testing.T, id, network string, gateways []*federationpb.Gateway, vip string, pods ...string) {
	t.Helper()
	tr := newTracker()
	f.trackers[id] = tr
	f.setPods(id, network, gateways, vip, pods...)
	runUplink(t, id, tr, (&killableDialer{client: federationClient(t, f.hub.FederationAddr().String())}).dial)
}

func (f *xdsFleet) setPods(id, network string, gateways []*federationpb.Gateway, vip string, pods ...string) {
	svc := testService("demo", "echo")
	svc.ClusterIps = []string{vip}
	var eps []*federationpb.Endpoint
	var wls []*federationpb.Workload
	for i, ip := range pods {
		name := fmt.Sprintf("echo-%s-%d", id, i)
		eps = append(eps, &federationpb.Endpoint{
			Namespace: "demo", Service: "echo", Address: ip, Ready: true, Serving: true,
			Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}},
			Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: name},
		})
		wls = append(wls, &federationpb.Workload{
			Uid: "uid-" + name, Namespace: "demo", Name: name, Ips: []string{ip}, ServiceAccount: "echo",
			Node: "node-1", Locality: &federationpb.Locality{Region: "r-" + id, Zone: "z1"}, Ready: true, Ambient: true,
			CanonicalName: "echo", CanonicalRevision: "v1",
		})
	}
	f.trackers[id].Update(time.Now(), true, func(w shard.Writer) {
		w.SetCluster(&federationpb.Cluster{Id: id, Network: network, TrustDomain: "cluster.local", Gateways: gateways})
		must(w.PutService(svc))
		must(w.SetEndpoints("demo/echo", eps))
		for _, wl := range wls {
			must(w.PutWorkload(wl))
		}
		// Pods no longer listed go away.
		for i := len(pods); i < 8; i++ {
			w.DeleteWorkload(fmt.Sprintf("uid-echo-%s-%d", id, i))
		}
	})
}

// ztunnel is a test client that behaves like ztunnel: delta ADS, wildcard
// subscriptions to Address and Authorization, ACKs, and a local store.
type ztunnel struct {
	t        *testing.T
	s        discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel   context.CancelFunc
	versions map[string]map[string]string // type → name → version
	store    map[string]*workloadapi.Address
	waiting  string // what until waits for, for error messages
}

func ztunnelNode(network string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"CLUSTER_ID": "east", "NETWORK": network, "NODE_NAME": "node-1"})
	return &core.Node{Id: "ztunnel~10.0.0.9~ztunnel-x.istio-system~istio-system.svc.cluster.local", Metadata: md}
}

// connectZtunnel opens a stream; initial is what a reconnecting ztunnel
// says it has.
func connectZtunnel(t *testing.T, addr, network string, initial map[string]string) *ztunnel {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	s, err := adsClient(t, addr).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	z := &ztunnel{t: t, s: s, cancel: cancel, versions: map[string]map[string]string{}, store: map[string]*workloadapi.Address{}}
	for _, typ := range []string{xds.AddressType, xds.AuthorizationType} {
		req := &discovery.DeltaDiscoveryRequest{Node: ztunnelNode(network), TypeUrl: typ}
		if typ == xds.AddressType {
			req.InitialResourceVersions = initial
		}
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	return z
}

// next receives one response, applies it to the store, ACKs it, and
// returns it.
func (z *ztunnel) next() *discovery.DeltaDiscoveryResponse {
	z.t.Helper()
	r, err := z.s.Recv()
	if err != nil {
		z.t.Fatalf("ztunnel (waiting for %q): %v", z.waiting, err)
	}
	vs := z.versions[r.GetTypeUrl()]
	if vs == nil {
		vs = map[string]string{}
		z.versions[r.GetTypeUrl()] = vs
	}
	for _, res := range r.GetResources() {
		vs[res.GetName()] = res.GetVersion()
		if r.GetTypeUrl() == xds.AddressType {
			var a workloadapi.Address
			if err := res.GetResource().UnmarshalTo(&a); err != nil {
				z.t.Fatalf("resource %s: %v", res.GetName(), err)
			}
			z.store[res.GetName()] = &a
		}
	}
	for _, name := range r.GetRemovedResources() {
		delete(vs, name)
		delete(z.store, name)
	}
	if err := z.s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
		z.t.Fatal(err)
	}
	return r
}

// until receives responses until cond holds on the store.
func (z *ztunnel) until(what string, cond func() bool) {
	z.t.Helper()
	done := make(chan struct{})
	defer close(done)
	timer := time.AfterFunc(20*time.Second, func() {
		select {
		case <-done:
		default:
			z.cancel()
		}
	})
	defer timer.Stop()
	z.waiting = what
	defer func() { z.waiting = "" }()
	for !cond() {
		z.next()
	}
}

func (z *ztunnel) workload(name string) *workloadapi.Workload { return z.store[name].GetWorkload() }

func ipBytes(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

func sameIPs(got [][]byte, want ...string) bool {
	return slices.EqualFunc(got, want, func(g []byte, w string) bool { return slices.Equal(g, ipBytes(w)) })
}

func TestZtunnelMultiNetwork(t *testing.T) {
	f := startXDSFleet(t)
	westGW := &federationpb.Gateway{Address: "127.0.0.60", Port: 15008, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE, Service: "istio-system/istio-eastwestgateway"}
	f.ambientCluster(t, "east", "net-a", nil, "10.96.0.1", "10.1.0.1", "10.1.0.2")
	f.ambientCluster(t, "west", "net-b", []*federationpb.Gateway{westGW}, "10.97.0.1", "10.2.0.1", "10.2.0.2")
	addr := f.hub.XDSAddr().String()

	z := connectZtunnel(t, addr, "net-a", nil)
	// Ready: a first response for both types, Authorization empty.
	got := map[string]bool{}
	for len(got) < 2 {
		got[z.next().GetTypeUrl()] = true
	}
	if len(z.versions[xds.AuthorizationType]) != 0 {
		t.Errorf("authorizations %v, want none", z.versions[xds.AuthorizationType])
	}
	split := "net-b/SplitHorizonWorkload/istio-system/istio-eastwestgateway/127.0.0.60/demo/echo.demo.svc.cluster.local"
	gwUID := "NetworkGateway/net-b/127.0.0.60/15008"
	z.until("the multi-network view", func() bool {
		return z.workload("east/uid-echo-east-0") != nil && z.workload("east/uid-echo-east-1") != nil &&
			z.workload(gwUID) != nil && z.workload(split) != nil && z.store["demo/echo.demo.svc.cluster.local"] != nil
	})

	w := z.workload("east/uid-echo-east-0")
	if w.GetClusterId() != "east" || w.GetNetwork() != "net-a" || w.GetLocality().GetRegion() != "r-east" ||
		!sameIPs(w.GetAddresses(), "10.1.0.1") || w.GetTunnelProtocol() != workloadapi.TunnelProtocol_HBONE ||
		w.GetServiceAccount() != "echo" || w.GetTrustDomain() != "cluster.local" || w.GetCanonicalName() != "echo" {
		t.Errorf("east workload: %v", w)
	}
	if ports := w.GetServices()["demo/echo.demo.svc.cluster.local"].GetPorts(); len(ports) != 1 || ports[0].GetServicePort() != 8080 || ports[0].GetTargetPort() != 9090 {
		t.Errorf("east workload's services: %v", w.GetServices())
	}
	for name, a := range z.store {
		if wl := a.GetWorkload(); wl != nil && wl.GetClusterId() == "west" && len(wl.GetAddresses()) > 0 && name != gwUID {
			t.Errorf("a ztunnel on net-a received west's pod %s with its address", name)
		}
	}
	sw := z.workload(split)
	if len(sw.GetAddresses()) != 0 || sw.GetCapacity().GetValue() != 2 || sw.GetNetwork() != "net-b" ||
		sw.GetNetworkGateway().GetHboneMtlsPort() != 15008 ||
		!slices.Equal(sw.GetNetworkGateway().GetAddress().GetAddress(), ipBytes("127.0.0.60")) ||
		sw.GetServices()["demo/echo.demo.svc.cluster.local"] == nil {
		t.Errorf("split-horizon workload: %v", sw)
	}
	gw := z.workload(gwUID)
	if gw.GetNetwork() != "net-b" || !sameIPs(gw.GetAddresses(), "127.0.0.60") {
		t.Errorf("gateway workload: %v", gw)
	}
	svc := z.store["demo/echo.demo.svc.cluster.local"].GetService()
	var vips []string
	for _, a := range svc.GetAddresses() {
		ip, _ := netip.AddrFromSlice(a.GetAddress())
		vips = append(vips, a.GetNetwork()+"/"+ip.String())
	}
	if !slices.Equal(vips, []string{"net-a/10.96.0.1", "net-b/10.97.0.1"}) || len(svc.GetSubjectAltNames()) == 0 {
		t.Errorf("service addresses %v, SANs %v", vips, svc.GetSubjectAltNames())
	}

	// A pod goes: it is removed by uid; a remote pod goes: capacity drops.
	before := map[string]string{}
	for k, v := range z.versions[xds.AddressType] {
		before[k] = v
	}
	f.setPods("east", "net-a", nil, "10.96.0.1", "10.1.0.1")
	f.setPods("west", "net-b", []*federationpb.Gateway{westGW}, "10.97.0.1", "10.2.0.1")
	z.until("the removal and the new capacity", func() bool {
		return z.workload("east/uid-echo-east-1") == nil && z.workload(split).GetCapacity().GetValue() == 1
	})

	// A ztunnel reconnecting with the old versions gets exactly the changes
	// and the removals.
	z.cancel()
	z2 := connectZtunnel(t, addr, "net-a", before)
	var resp *discovery.DeltaDiscoveryResponse
	for resp == nil || resp.GetTypeUrl() != xds.AddressType {
		resp = z2.next()
	}
	var sent []string
	for _, r := range resp.GetResources() {
		sent = append(sent, r.GetName())
	}
	slices.Sort(sent)
	if !slices.Equal(resp.GetRemovedResources(), []string{"east/uid-echo-east-1"}) {
		t.Errorf("removed on reconnect: %v, want the deleted pod", resp.GetRemovedResources())
	}
	for _, name := range sent {
		if name == "east/uid-echo-east-0" || name == gwUID {
			t.Errorf("unchanged %s was resent on reconnect (sent %v)", name, sent)
		}
	}
	if !slices.Contains(sent, split) {
		t.Errorf("the changed split-horizon workload was not resent: %v", sent)
	}
}

// TestXDSWarmUpHoldsProxies: a proxy that connects to a hub before its
// spokes is held, not answered with an empty or half-built clusterset; its
// first response carries every cluster that connected during the warm-up.
func TestXDSWarmUpHoldsProxies(t *testing.T) {
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.XDSWarmUp, cfg.XDSWarmUpQuiet = 3*time.Second, time.Second // its spokes name no members: the limit ends the warm-up
	cfg.XDSWorkloadAPI = true
	h, err := hub.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, h.Run)
	f := &xdsFleet{hub: h, trackers: map[string]tracker{}}

	z := connectZtunnel(t, h.XDSAddr().String(), "net-a", nil)
	f.ambientCluster(t, "east", "net-a", nil, "10.96.0.1", "10.1.0.1")
	f.ambientCluster(t, "west", "net-a", nil, "10.97.0.1", "10.2.0.1")
	var first *discovery.DeltaDiscoveryResponse
	for first == nil {
		if r := z.next(); r.GetTypeUrl() == xds.AddressType {
			first = r
		}
	}
	if z.workload("east/uid-echo-east-0") == nil || z.workload("west/uid-echo-west-0") == nil {
		t.Errorf("the first Address response has %d resources, not both clusters' workloads: %v", len(first.GetResources()), slices.Collect(maps.Keys(z.store)))
	}
}
