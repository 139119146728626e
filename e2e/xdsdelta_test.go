//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/xds/resources"
)

func testNode(id string) *core.Node {
	md, _ := structpb.NewStruct(map[string]any{"CLUSTER_ID": "east", "NETWORK": "net1"})
	return &core.Node{Id: id, Metadata: md, Locality: &core.Locality{Region: "r-east", Zone: "z-east"}}
}

func names(rs []*discovery.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetName())
	}
	return out
}

func addresses(t *testing.T, r *discovery.Resource) []string {
	t.Helper()
	var cla endpointv3.ClusterLoadAssignment
	if err := r.GetResource().UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(out)
	return out
}

// waitServed waits until the hub's xDS cache serves a resource.
func (f *xdsFleet) waitServed(t *testing.T, typeURL, view, name string) {
	t.Helper()
	testwait.For(t, name+" in the xDS cache", func() bool {
		_, ok := f.hub.XDS().Resources(typeURL, view)[name]
		return ok
	})
}

func TestXDSDelta(t *testing.T) {
	f := startXDSFleet(t)
	f.cluster(t, "east", "net1", "z-east", nil, backend{"10.0.0.1", 8080}, backend{"10.0.0.2", 8080})
	f.waitServed(t, resourcev3.ClusterType, "", echoCluster)
	addr := f.hub.XDSAddr().String()

	d := openDelta(t, addr)
	d.send(&discovery.DeltaDiscoveryRequest{Node: testNode("delta-1"), TypeUrl: resourcev3.ClusterType})
	cds := d.recv()
	if got := names(cds.GetResources()); !slices.Contains(got, echoCluster) {
		t.Fatalf("wildcard CDS = %v, want %s", got, echoCluster)
	}
	d.ack(cds)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{echoCluster}})
	eds := d.recv()
	if len(eds.GetResources()) != 1 || !slices.Equal(addresses(t, eds.GetResources()[0]), []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("EDS = %v", eds)
	}
	edsVersion := eds.GetResources()[0].GetVersion()
	d.ack(eds)

	// An endpoint change sends that EDS resource alone, as a delta.
	f.setEndpoints("east", "net1", "z-east", nil, backend{"10.0.0.1", 8080})
	eds = d.recv()
	if eds.GetTypeUrl() != resourcev3.EndpointType || len(eds.GetResources()) != 1 || !slices.Equal(addresses(t, eds.GetResources()[0]), []string{"10.0.0.1"}) {
		t.Fatalf("EDS after the change = %v", eds)
	}
	d.ack(eds)

	// A NACK is recorded and visible.
	d.send(&discovery.DeltaDiscoveryRequest{
		TypeUrl: resourcev3.EndpointType, ResponseNonce: eds.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "test rejects this"},
	})
	testwait.For(t, "the NACK in /debug/proxies", func() bool {
		for _, p := range f.hub.XDS().Proxies() {
			if ts, ok := p.Types[resourcev3.EndpointType]; ok && p.ID == "delta-1" && ts.Nacks == 1 && ts.NackReason == "test rejects this" {
				return true
			}
		}
		return false
	})
	var proxies struct {
		Proxies []struct {
			ID    string `json:"id"`
			Delta bool   `json:"delta"`
		} `json:"proxies"`
	}
	getJSON(t, "http://"+f.hub.DebugAddr().String()+"/debug/proxies", &proxies)
	if len(proxies.Proxies) != 1 || proxies.Proxies[0].ID != "delta-1" || !proxies.Proxies[0].Delta {
		t.Errorf("/debug/proxies = %+v", proxies)
	}

	// Unexporting the service removes its cluster by name.
	f.trackers["east"].Update(time.Now(), true, func(w shard.Writer) { w.DeleteService("demo/echo") })
	for {
		r := d.recv()
		d.ack(r)
		if r.GetTypeUrl() == resourcev3.ClusterType {
			if !slices.Contains(r.GetRemovedResources(), echoCluster) {
				t.Fatalf("CDS after unexport = %v, want %s removed", r, echoCluster)
			}
			break
		}
	}

	// A reconnecting client states what it has: stale versions come back
	// as removals, and nothing unchanged is resent.
	f.setEndpoints("east", "net1", "z-east", nil, backend{"10.0.0.1", 8080}, backend{"10.0.0.2", 8080})
	view := resources.View{Network: "net1", Locality: resources.Locality{Region: "r-east", Zone: "z-east"}}.Key()
	// Wait for this content: a push sends CDS before it updates EDS, so the
	// old assignment can still be there for a moment.
	testwait.For(t, "echo's two endpoints in the xDS cache", func() bool {
		return f.hub.XDS().Resources(resourcev3.EndpointType, view)[echoCluster] == edsVersion
	})
	d2 := openDelta(t, addr)
	d2.send(&discovery.DeltaDiscoveryRequest{
		Node: testNode("delta-2"), TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{echoCluster, "outbound|1||gone.demo.svc.cluster.local"},
		InitialResourceVersions: map[string]string{echoCluster: edsVersion, "outbound|1||gone.demo.svc.cluster.local": "v0"},
	})
	r := d2.recv()
	if !slices.Equal(r.GetRemovedResources(), []string{"outbound|1||gone.demo.svc.cluster.local"}) {
		t.Errorf("removed %v, want the name that no longer exists", r.GetRemovedResources())
	}
	if got := names(r.GetResources()); len(got) != 0 {
		t.Errorf("resent %v (version %s, addresses %v) although the client has version %s", got,
			r.GetResources()[0].GetVersion(), addresses(t, r.GetResources()[0]), edsVersion)
	}
}

func TestXDSStateOfTheWorldNackIsRecorded(t *testing.T) {
	f := startXDSFleet(t)
	f.cluster(t, "east", "net1", "z-east", nil, backend{"10.0.0.1", 8080})
	f.waitServed(t, resourcev3.ClusterType, "", echoCluster)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := adsClient(t, f.hub.XDSAddr().String()).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: testNode("sotw-1"), TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResources()) != 2 || r.GetVersionInfo() == "" { // cluster.local and clusterset.local
		t.Fatalf("CDS = %v", r)
	}
	if err := s.Send(&discovery.DiscoveryRequest{
		TypeUrl: resourcev3.ClusterType, ResponseNonce: r.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "cluster rejected"},
	}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the NACK to be recorded", func() bool {
		ps := f.hub.XDS().Proxies()
		return len(ps) == 1 && ps[0].Types[resourcev3.ClusterType].Nacks == 1 &&
			strings.Contains(ps[0].Types[resourcev3.ClusterType].NackReason, "rejected")
	})
	if body := getText(t, "http://"+f.hub.DebugAddr().String()+"/metrics"); !strings.Contains(body, `meshfed_xds_nacks_total{type="type.googleapis.com/envoy.config.cluster.v3.Cluster"} 1`) {
		t.Errorf("the NACK metric is missing from /metrics")
	}
}
