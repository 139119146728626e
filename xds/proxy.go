package xds

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/xds/resources"
)

// Node metadata keys proxies send (Istio's).
const (
	MetadataClusterID = "CLUSTER_ID"
	MetadataNetwork   = "NETWORK"
)

// Proxy is what the hub knows of a connected proxy.
type Proxy struct {
	ID       string
	Cluster  federation.ClusterID
	Network  federation.NetworkID
	Locality resources.Locality
	// Proxyless: a gRPC client (see resources.View).
	Proxyless bool
}

// View is the proxy's EDS view.
func (p Proxy) View() resources.View {
	return resources.View{Network: p.Network, Locality: p.Locality, Proxyless: p.Proxyless}
}

// featureNoOverprovisioning is the client feature every gRPC xDS client
// sends (gRFC A27), whatever its language's user agent says.
const featureNoOverprovisioning = "envoy.lb.does_not_support_overprovisioning"

// isProxyless tells a gRPC client from its node: its user agent ("gRPC
// Go", "gRPC Java", ...) or the client feature gRPC clients send.
func isProxyless(node *adspb.Node) bool {
	return strings.HasPrefix(strings.ToLower(node.GetUserAgentName()), "grpc") ||
		slices.Contains(node.GetClientFeatures(), featureNoOverprovisioning)
}

// ProxyFromNode reads a proxy's identity from its xDS node. A proxy that
// names no network is on its cluster's default network (from clusters).
func ProxyFromNode(node *adspb.Node, clusters []*clusterset.ClusterInfo) (Proxy, error) {
	if node == nil {
		return Proxy{}, errors.New("the request carries no node")
	}
	p := Proxy{ID: node.GetId(), Proxyless: isProxyless(node)}
	fields := node.GetMetadata().GetFields()
	if v, ok := fields[MetadataClusterID]; ok {
		s := v.GetStringValue()
		if msgs := validation.IsDNS1123Label(s); s != "" && len(msgs) > 0 {
			return Proxy{}, fmt.Errorf("node %q: metadata %s %q: %v", node.GetId(), MetadataClusterID, s, msgs[0])
		}
		p.Cluster = federation.ClusterID(s)
	}
	if v, ok := fields[MetadataNetwork]; ok {
		s := v.GetStringValue()
		if msgs := validation.IsValidLabelValue(s); len(msgs) > 0 {
			return Proxy{}, fmt.Errorf("node %q: metadata %s %q: %v", node.GetId(), MetadataNetwork, s, msgs[0])
		}
		p.Network = federation.NetworkID(s)
	}
	if p.Network == "" && p.Cluster != "" {
		for _, c := range clusters {
			if c.ID == p.Cluster {
				p.Network = c.Network
			}
		}
	}
	l := node.GetLocality()
	p.Locality = resources.Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubZone()}
	for _, s := range []string{p.Locality.Region, p.Locality.Zone, p.Locality.Subzone} {
		if len(s) > 128 {
			return Proxy{}, fmt.Errorf("node %q: locality part of %d bytes is too long", node.GetId(), len(s))
		}
	}
	return p, nil
}
