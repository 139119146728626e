package resources

import (
	"net/netip"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshfed/meshfed/clusterset"
)

// Encoded is one resource, encoded.
type Encoded struct {
	Name  string
	Value []byte
}

// EncodeClusters returns one CDS cluster per (hostname, port) of s, in the
// order of Hostnames and Ports. Each is an EDS cluster fed over ADS, the
// only kinds grpc-go accepts; headless services are no exception, since
// proxyless clients balance across the pod IPs themselves. Every cluster
// connects with a timeout of 5s: Envoy's default too, but grpc-go and some
// Envoy versions treat an unset value differently, so it is spelled out.
//
// Like every encoding here, the bytes are those of proto's deterministic
// marshalling of the messages, written without building them: resource
// versions are hashes of these bytes, so they must not change from one
// hub version to the next.
func EncodeClusters(s *clusterset.ServiceView) []Encoded {
	var out []Encoded
	for _, h := range Hostnames(s) {
		for _, p := range Ports(s) {
			name := ClusterName(p.GetPort(), h)
			out = append(out, Encoded{Name: name, Value: encodeCluster(name)})
		}
	}
	return out
}

// EncodeListeners returns one api_listener per (hostname, port) of s: an
// HTTP connection manager that fetches its routes over ADS (RDS) from the
// route configuration of the same (hostname, port), and whose only filter
// is the router (gRPC requires a terminal filter last). vips, an MCS
// import's ClusterSetIPs (clusterset.Import), get listeners too
// ("<ip>:<port>", what a client that dials xds:///<ip>:<port> asks for),
// routed as its clusterset hostname; an invalid one is skipped.
func EncodeListeners(s *clusterset.ServiceView, vips []netip.Addr) []Encoded {
	var out []Encoded
	for _, h := range Hostnames(s) {
		for _, p := range Ports(s) {
			name := ListenerName(h, p.GetPort())
			out = append(out, Encoded{Name: name, Value: encodeListener(name, ClusterName(p.GetPort(), h))})
		}
	}
	for _, ip := range vips {
		if !ip.IsValid() {
			continue // the family has none (its CIDR is exhausted)
		}
		for _, p := range Ports(s) {
			name := VIPListenerName(ip, p.GetPort())
			out = append(out, Encoded{Name: name, Value: encodeListener(name, ClusterName(p.GetPort(), s.ClustersetHostname))})
		}
	}
	return out
}

// EncodeRoutes returns one route configuration per (hostname, port) of s,
// named like the cluster: one virtual host matching "<host>:<port>" (the
// authority a gRPC client sends) and "<host>", routing everything to the
// cluster. The clusterset hostname's also matches "<vip>:<port>" for each
// of vips, the import's ClusterSetIPs.
func EncodeRoutes(s *clusterset.ServiceView, vips []netip.Addr) []Encoded {
	var out []Encoded
	for _, h := range Hostnames(s) {
		for _, p := range Ports(s) {
			name := ClusterName(p.GetPort(), h)
			domains := []string{ListenerName(h, p.GetPort()), h}
			if h == s.ClustersetHostname {
				// A client that dialled a ClusterSetIP sends it as its
				// authority.
				for _, ip := range vips {
					if ip.IsValid() {
						domains = append(domains, VIPListenerName(ip, p.GetPort()))
					}
				}
			}
			out = append(out, Encoded{Name: name, Value: encodeRoute(name, ListenerName(h, p.GetPort()), domains)})
		}
	}
	return out
}

// Field numbers and values of the envoy.config.cluster.v3,
// envoy.config.listener.v3, envoy.config.route.v3 and
// envoy.extensions.filters.network.http_connection_manager.v3 messages the
// encoders write. protobuf-go writes the fields outside a oneof by number,
// then the set member of each oneof: the encoders write them in that
// order.
const (
	clusterName       = 1 // Cluster
	clusterType       = 2 // oneof cluster_discovery_type
	clusterEdsConfig  = 3
	clusterTimeout    = 4
	clusterTypeEDS    = 3 // Cluster.DiscoveryType (lb_policy 0 is ROUND_ROBIN: not written)
	edsConfigSource   = 1 // Cluster.EdsClusterConfig
	edsServiceName    = 2
	durationSeconds   = 1 // google.protobuf.Duration
	configSourceADS   = 3 // ConfigSource, oneof config_source_specifier
	configSourceAPI   = 6 // resource_api_version
	apiVersionV3      = 2 // ApiVersion
	listenerName      = 1 // Listener
	listenerAPI       = 19
	apiListenerAny    = 1 // ApiListener
	anyTypeURL        = 1 // google.protobuf.Any
	anyValue          = 2
	hcmStatPrefix     = 2 // HttpConnectionManager
	hcmRds            = 3 // oneof route_specifier
	hcmHTTPFilters    = 5
	rdsConfigSource   = 1 // Rds
	rdsRouteConfig    = 2
	filterName        = 1 // HttpFilter
	filterTypedConfig = 4 // oneof config_type
	routeConfigName   = 1 // RouteConfiguration
	routeConfigHosts  = 2
	vhostName         = 1 // VirtualHost
	vhostDomains      = 2
	vhostRoutes       = 3
	routeMatch        = 1 // Route
	routeAction       = 2 // oneof action
	matchPrefix       = 1 // RouteMatch, oneof path_specifier
	actionCluster     = 1 // RouteAction, oneof cluster_specifier
)

// Type URLs of the messages the listeners wrap in an Any.
const (
	hcmType    = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	routerType = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
)

// routerFilterName is the well-known name of Envoy's router filter.
const routerFilterName = "envoy.filters.http.router"

// connectTimeoutSeconds is every cluster's connect_timeout.
const connectTimeoutSeconds = 5

var (
	// adsConfigSource says "over the same ADS stream", the only config
	// source grpc-go accepts besides "self".
	adsConfigSource = appendMessage(
		protowire.AppendVarint(protowire.AppendTag(nil, configSourceAPI, protowire.VarintType), apiVersionV3),
		configSourceADS, nil)
	connectTimeout = protowire.AppendVarint(protowire.AppendTag(nil, durationSeconds, protowire.VarintType), connectTimeoutSeconds)
	// routerFilter is the HttpFilter of the router, its config an empty
	// Router message.
	routerFilter = appendMessage(appendStringField(nil, filterName, routerFilterName),
		filterTypedConfig, appendStringField(nil, anyTypeURL, routerType))
)

func encodeCluster(name string) []byte {
	eds := appendMessage(nil, edsConfigSource, adsConfigSource)
	eds = appendStringField(eds, edsServiceName, name)
	out := appendStringField(nil, clusterName, name)
	out = appendMessage(out, clusterEdsConfig, eds)
	out = appendMessage(out, clusterTimeout, connectTimeout)
	out = protowire.AppendTag(out, clusterType, protowire.VarintType)
	return protowire.AppendVarint(out, clusterTypeEDS)
}

// encodeListener is an api_listener whose routes are the route
// configuration named route.
func encodeListener(name, route string) []byte {
	rds := appendMessage(nil, rdsConfigSource, adsConfigSource)
	rds = appendStringField(rds, rdsRouteConfig, route)
	hcm := appendStringField(nil, hcmStatPrefix, name)
	hcm = appendMessage(hcm, hcmHTTPFilters, routerFilter)
	hcm = appendMessage(hcm, hcmRds, rds)
	anyHCM := appendStringField(nil, anyTypeURL, hcmType)
	anyHCM = appendMessage(anyHCM, anyValue, hcm)
	out := appendStringField(nil, listenerName, name)
	return appendMessage(out, listenerAPI, appendMessage(nil, apiListenerAny, anyHCM))
}

func encodeRoute(name, host string, domains []string) []byte {
	match := appendString(nil, matchPrefix, "/")
	action := appendString(nil, actionCluster, name)
	route := appendMessage(appendMessage(nil, routeMatch, match), routeAction, action)
	vhost := appendStringField(nil, vhostName, host)
	for _, d := range domains {
		vhost = appendString(vhost, vhostDomains, d)
	}
	vhost = appendMessage(vhost, vhostRoutes, route)
	out := appendStringField(nil, routeConfigName, name)
	return appendMessage(out, routeConfigHosts, vhost)
}

// appendMessage appends a message field, even an empty one (a set oneof
// member or an element of a repeated field is written whatever its size).
func appendMessage(out []byte, num protowire.Number, m []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(out, num, protowire.BytesType), m)
}

// appendString appends a string field, even an empty one (as a set oneof
// member or an element of a repeated field is); appendStringField is for
// the other string fields, left out when empty.
func appendString(out []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(out, num, protowire.BytesType), s)
}
