package xds

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/internal/adspb"
)

// FuzzProxyFromNode: whatever a proxy puts in its node, reading it never
// panics, and an accepted proxy has a valid network, a cluster that is a
// DNS label or empty, and bounded locality parts.
func FuzzProxyFromNode(f *testing.F) {
	f.Add("sidecar~10.0.0.1~echo.demo~demo.svc.cluster.local", "east", "network-east", "us-east1", "us-east1-a", "")
	f.Add("ztunnel", "", "", "", "", "")
	f.Add("x", "Not_A_Label", "net/work", strings.Repeat("r", 200), "z", "s")
	clusters := []*clusterset.ClusterInfo{{ID: "east", Network: "network-east"}}
	f.Fuzz(func(t *testing.T, id, cluster, network, region, zone, subzone string) {
		if !utf8.ValidString(id + cluster + network + region + zone + subzone) {
			return // protobuf decoding rejects invalid UTF-8 before the hub sees it
		}
		node := &adspb.Node{
			Id: id, Locality: &adspb.Locality{Region: region, Zone: zone, SubZone: subzone},
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
				MetadataClusterID: structpb.NewStringValue(cluster),
				MetadataNetwork:   structpb.NewStringValue(network),
			}},
		}
		p, err := ProxyFromNode(node, clusters)
		if err != nil {
			return
		}
		if p.ID != id || (network != "" && string(p.Network) != network) {
			t.Errorf("proxy %+v from id %q network %q", p, id, network)
		}
		if network == "" && cluster == "east" && p.Network != "network-east" {
			t.Errorf("a proxy of cluster east without a network is on %q, want east's network", p.Network)
		}
		for _, s := range []string{p.Locality.Region, p.Locality.Zone, p.Locality.Subzone} {
			if len(s) > 128 {
				t.Errorf("accepted a locality part of %d bytes", len(s))
			}
		}
	})
}

// TestProxyless: gRPC clients of any language are told from Envoy by
// their user agent or by the client feature every gRPC client sends.
func TestProxyless(t *testing.T) {
	for _, tc := range []struct {
		node *adspb.Node
		want bool
	}{
		{&adspb.Node{Id: "a", UserAgentName: "gRPC Go"}, true},
		{&adspb.Node{Id: "b", UserAgentName: "gRPC Java"}, true},
		{&adspb.Node{Id: "c", ClientFeatures: []string{"xds.config.resource-in-sotw", "envoy.lb.does_not_support_overprovisioning"}}, true},
		{&adspb.Node{Id: "d", UserAgentName: "envoy"}, false},
		{&adspb.Node{Id: "e"}, false},
	} {
		p, err := ProxyFromNode(tc.node, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.Proxyless != tc.want || p.View().Proxyless != tc.want {
			t.Errorf("node %s: proxyless %v, want %v", tc.node.GetId(), p.Proxyless, tc.want)
		}
		if got := proxyKind(tc.node, ""); (got == kindGRPC) != tc.want {
			t.Errorf("node %s: kind %q", tc.node.GetId(), got)
		}
	}
}
