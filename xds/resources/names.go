package resources

import (
	"net/netip"
	"net/url"
	"strconv"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Type URLs of the Envoy resources the hub serves, as proxies ask for
// them and as Any wraps them.
const (
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// ClusterName is the name of the CDS cluster, the RDS route configuration
// and the EDS resource of a (hostname, port): "outbound|<port>||<hostname>",
// as Istio names them, so that tools and dashboards built for Istio work.
func ClusterName(port uint32, hostname string) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "||" + hostname
}

// ListenerName is the name of the api_listener of a (hostname, port):
// "<hostname>:<port>", the name a proxyless gRPC client asks for when it
// dials xds:///<hostname>:<port>.
func ListenerName(hostname string, port uint32) string {
	return hostname + ":" + strconv.FormatUint(uint64(port), 10)
}

// VIPListenerName is the name of the api_listener of a (virtual IP,
// port): "<ip>:<port>", with an IPv6 address in brackets.
func VIPListenerName(ip netip.Addr, port uint32) string {
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// Hostnames returns the names clients use for s: its cluster-local
// hostname, then its clusterset hostname when some cluster exports it
// through MCS.
func Hostnames(s *clusterset.ServiceView) []string {
	var hs []string
	if s.Hostname != "" {
		hs = append(hs, s.Hostname)
	}
	if s.ClustersetHostname != "" && s.ClustersetHostname != s.Hostname {
		hs = append(hs, s.ClustersetHostname)
	}
	return hs
}

// Ports returns the ports of s that get xDS resources, sorted by number:
// the TCP ones (an unspecified protocol means TCP, as in Kubernetes).
// Envoy's HTTP connection manager and gRPC carry only TCP, and Istio skips
// UDP ports the same way. A port number appears once even if the service
// has it for several protocols, since the number is part of every name.
func Ports(s *clusterset.ServiceView) []*federationpb.ServicePort {
	var out []*federationpb.ServicePort
	for _, p := range s.Ports {
		if normalProtocol(p.GetProtocol()) != federationpb.Protocol_PROTOCOL_TCP || p.GetPort() == 0 || p.GetPort() > 65535 {
			continue
		}
		if len(out) > 0 && out[len(out)-1].GetPort() == p.GetPort() {
			continue // ServiceView.Ports is sorted by number.
		}
		out = append(out, p)
	}
	return out
}

func normalProtocol(p federationpb.Protocol) federationpb.Protocol {
	if p == federationpb.Protocol_PROTOCOL_UNSPECIFIED {
		return federationpb.Protocol_PROTOCOL_TCP
	}
	return p
}

// Locality is a proxy's or endpoint's region/zone/subzone.
type Locality = clusterset.Locality

// View is what makes one proxy's endpoints differ from another's: its
// network, its locality, and whether it is a gRPC client. Proxies with
// equal Views share EDS.
type View struct {
	Network  federation.NetworkID
	Locality Locality
	// Proxyless: a gRPC client, which uses only HEALTHY and UNKNOWN
	// endpoints (gRFC A27). It is sent no draining endpoint: one would be
	// ignored, and a priority holding only such would be an empty one.
	// Envoy is sent them DRAINING, so that it lets their requests finish.
	Proxyless bool
}

// Key is a stable string key of v, "network/region/zone/subzone", with
// "/grpc" after it for a proxyless view. Each part is path-escaped:
// proxies report these values in node metadata, unchecked, and a "/"
// inside one must not make two Views share a key.
func (v View) Key() string {
	k := url.PathEscape(string(v.Network)) + "/" +
		url.PathEscape(v.Locality.Region) + "/" +
		url.PathEscape(v.Locality.Zone) + "/" +
		url.PathEscape(v.Locality.Subzone)
	if v.Proxyless {
		k += "/grpc"
	}
	return k
}
