package reference

import (
	"fmt"
	"net/netip"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/xds/resources"
)

// connectTimeout bounds TCP connects to an endpoint. Envoy's default is 5s
// too, but grpc-go and some Envoy versions treat an unset value
// differently, so it is spelled out. Package resources spells out this
// value and the next on its own: the reference is written independently of
// the encodings it checks.
const connectTimeout = 5 * time.Second

// routerFilterName is the well-known name of Envoy's router filter; gRPC
// requires a terminal filter last in http_filters.
const routerFilterName = "envoy.filters.http.router"

// Clusters returns as messages the CDS clusters resources.EncodeClusters
// encodes: one per (hostname, port) of s, in the order of
// resources.Hostnames and resources.Ports, an EDS cluster fed over ADS.
func Clusters(s *clusterset.ServiceView) []*clusterv3.Cluster {
	var out []*clusterv3.Cluster
	for _, h := range resources.Hostnames(s) {
		for _, p := range resources.Ports(s) {
			name := resources.ClusterName(p.GetPort(), h)
			out = append(out, &clusterv3.Cluster{
				Name:                 name,
				ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
				EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
					EdsConfig:   adsConfigSource(),
					ServiceName: name,
				},
				LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
				ConnectTimeout: durationpb.New(connectTimeout),
			})
		}
	}
	return out
}

// Listeners returns as messages the api_listeners
// resources.EncodeListeners encodes: one per (hostname, port) of s, an
// HTTP connection manager that fetches its routes over ADS (RDS) from the
// route configuration of the same (hostname, port), then one per
// ClusterSetIP and port, routed as the clusterset hostname.
func Listeners(s *clusterset.ServiceView, vips []netip.Addr) []*listenerv3.Listener {
	var out []*listenerv3.Listener
	for _, h := range resources.Hostnames(s) {
		for _, p := range resources.Ports(s) {
			out = append(out, listener(resources.ListenerName(h, p.GetPort()), resources.ClusterName(p.GetPort(), h)))
		}
	}
	for _, ip := range vips {
		if !ip.IsValid() {
			continue // the family has none (its CIDR is exhausted)
		}
		for _, p := range resources.Ports(s) {
			out = append(out, listener(resources.VIPListenerName(ip, p.GetPort()), resources.ClusterName(p.GetPort(), s.ClustersetHostname)))
		}
	}
	return out
}

// listener is an api_listener whose routes are the route configuration
// named route.
func listener(name, route string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: route,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       routerFilterName,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
	}
}

// Routes returns as messages the route configurations
// resources.EncodeRoutes encodes: one per (hostname, port) of s, named like
// the cluster, with one virtual host matching "<host>:<port>" (the
// authority a gRPC client sends) and "<host>" (and, for the clusterset
// hostname, its ClusterSetIPs), routing everything to the cluster.
func Routes(s *clusterset.ServiceView, vips []netip.Addr) []*routev3.RouteConfiguration {
	var out []*routev3.RouteConfiguration
	for _, h := range resources.Hostnames(s) {
		for _, p := range resources.Ports(s) {
			name := resources.ClusterName(p.GetPort(), h)
			domains := []string{resources.ListenerName(h, p.GetPort()), h}
			if h == s.ClustersetHostname {
				// A client that dialled a ClusterSetIP sends it as its
				// authority.
				for _, ip := range vips {
					if ip.IsValid() {
						domains = append(domains, resources.VIPListenerName(ip, p.GetPort()))
					}
				}
			}
			out = append(out, &routev3.RouteConfiguration{
				Name: name,
				VirtualHosts: []*routev3.VirtualHost{{
					Name:    resources.ListenerName(h, p.GetPort()),
					Domains: domains,
					Routes: []*routev3.Route{{
						Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
						Action: &routev3.Route_Route{Route: &routev3.RouteAction{
							ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name},
						}},
					}},
				}},
			})
		}
	}
	return out
}

// adsConfigSource says "over the same ADS stream", the only config source
// grpc-go accepts besides "self".
func adsConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// mustAny wraps m in an Any. Marshaling fails only for invalid UTF-8 in a
// string field or a message over 2 GiB. The messages wrapped here are small
// and hold only names built from service hostnames, which reached the hub
// through protobuf decoding (valid UTF-8) and validation (DNS names), so a
// failure is a bug.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("reference: wrapping %T: %v", m, err))
	}
	return a
}
