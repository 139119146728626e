//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestXDSStuckProxyDelaysNoOne: a proxy that subscribes and then never
// reads nor acknowledges does not hold back pushes to the others.
func TestXDSStuckProxyDelaysNoOne(t *testing.T) {
	f := startXDSFleet(t)
	east := startBackend(t, "127.0.0.34", "east")
	west := startBackend(t, "127.0.0.44", "west")
	f.cluster(t, "east", "net1", "z-east", nil, east)
	f.cluster(t, "west", "net1", "z-west", nil, west)
	f.waitServed(t, resourcev3.ClusterType, "", echoCluster)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stuck, err := adsClient(t, f.hub.XDSAddr().String()).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
		if err := stuck.Send(&discovery.DiscoveryRequest{Node: testNode("stuck"), TypeUrl: typ}); err != nil {
			t.Fatal(err)
		}
	}
	if err := stuck.Send(&discovery.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{echoCluster}}); err != nil {
		t.Fatal(err)
	}

	c := xdsClient(t, f.hub.XDSAddr().String(), "client-east", "east", "net1", "r-east", "z-east")
	eventually(t, c, "east")
	for range 20 { // many changes the stuck proxy never reads
		f.setEndpoints("east", "net1", "z-east", nil)
		eventually(t, c, "west")
		f.setEndpoints("east", "net1", "z-east", nil, east)
		eventually(t, c, "east")
	}
}
