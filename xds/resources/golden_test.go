package resources

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // for protojson: a listener's router filter config is an Any
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

type namedView struct {
	name string
	view View
}

// goldenCase is a service, the clusterset's clusters (for gateways) and the
// proxy views to compute EDS for.
type goldenCase struct {
	name    string
	service *clusterset.ServiceView
	// vips are the ClusterSetIPs of the service's import.
	vips     []netip.Addr
	clusters []*clusterset.ClusterInfo
	views    []namedView
	// check makes assertions beyond the golden file.
	check func(t *testing.T, out *output)
}

// output is everything generated for one case.
type output struct {
	clusters    []*clusterv3.Cluster
	listeners   []*listenerv3.Listener
	routes      []*routev3.RouteConfiguration
	assignments []assignment
}

type assignment struct {
	view string
	cla  *endpointv3.ClusterLoadAssignment
}

// find returns the assignment of resource name for a view.
func (o *output) find(t *testing.T, view, name string) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	for _, a := range o.assignments {
		if a.view == view && a.cla.GetClusterName() == name {
			return a.cla
		}
	}
	t.Fatalf("no assignment %q for view %q", name, view)
	return nil
}

// generate returns what proxies are sent for a golden case, decoded.
func generate(t *testing.T, c goldenCase) *output {
	t.Helper()
	out := serviceOutput(t, c.service, c.vips)
	gws := clusterset.NewGateways(c.clusters)
	for _, v := range c.views {
		for _, h := range Hostnames(c.service) {
			for _, p := range Ports(c.service) {
				out.assignments = append(out.assignments, assignment{v.name, loadAssignment(t, c.service, h, p, v.view, gws)})
			}
		}
	}
	return out
}

const (
	echoHost = "echo.demo.svc.cluster.local"
	echo8080 = "outbound|8080||" + echoHost
)

func goldenCases() []goldenCase {
	svc := baseService()
	return []goldenCase{
		{
			name: "single-cluster",
			service: merged(export("east", "net-1", svc,
				pod("10.1.0.2", "r1", "z1"),
				pod("10.1.0.1", "r1", "z1"),
				pod("10.1.0.3", "r1", "z2"),
			)),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1")},
			views:    []namedView{{"net-1-z1", view("net-1", "r1", "z1", "")}},
		},
		{
			name: "two-clusters-same-network",
			service: merged(
				export("east", "net-1", svc, pod("10.1.0.1", "r1", "z1")),
				export("west", "net-1", svc, pod("10.2.0.1", "r1", "z2"), pod("10.2.0.2", "r2", "z3")),
			),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1"), cluster("west", "net-1")},
			views:    []namedView{{"net-1-z1", view("net-1", "r1", "z1", "")}},
		},
		{
			name: "multi-network",
			service: merged(
				export("east", "net-east", svc, pod("10.1.0.1", "r1", "z1"), pod("10.1.0.2", "r1", "z2")),
				export("west", "net-west", svc, pod("10.2.0.1", "r1", "z1"), pod("10.2.0.2", "r2", "z3"), pod("10.2.0.3", "r2", "z3")),
			),
			clusters: []*clusterset.ClusterInfo{
				cluster("east", "net-east", gateway("192.0.2.1", 15443, tls)),
				cluster("west", "net-west",
					gateway("192.0.2.11", 15443, tls),
					gateway("192.0.2.10", 15443, tls),
					gateway("192.0.2.12", 15008, hbon),         // another protocol: ignored
					gateway("gw.west.example.com", 15443, tls), // a DNS name: not usable in EDS
				),
			},
			views: []namedView{
				{"east-z1", view("net-east", "r1", "z1", "")},
				{"west-z3", view("net-west", "r2", "z3", "")},
			},
			check: func(t *testing.T, out *output) {
				t.Helper()
				east := out.find(t, "east-z1", echo8080)
				assertNoAddressIn(t, east, "10.2.0.0/16") // west's pods, never seen from east
				got := weights(east)
				want := map[string]uint32{
					// 3 west pods over 2 gateways: every weight scaled by 2.
					"10.1.0.1:9090": 2, "10.1.0.2:9090": 2,
					"192.0.2.10:15443": 3, "192.0.2.11:15443": 3,
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("east-z1 weights (-want +got):\n%s", diff)
				}
				west := out.find(t, "west-z3", echo8080)
				assertNoAddressIn(t, west, "10.1.0.0/16")
				if diff := cmp.Diff(map[string]uint32{
					"10.2.0.1:9090": 1, "10.2.0.2:9090": 1, "10.2.0.3:9090": 1,
					"192.0.2.1:15443": 2,
				}, weights(west)); diff != "" {
					t.Errorf("west-z3 weights (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "remote-network-without-gateway",
			service: merged(
				export("east", "net-east", svc, pod("10.1.0.1", "r1", "z1")),
				export("west", "net-west", svc, pod("10.2.0.1", "r1", "z1")),
			),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-east"), cluster("west", "net-west", gateway("192.0.2.12", 15008, hbon))},
			views:    []namedView{{"east", view("net-east", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				if diff := cmp.Diff(map[string]uint32{"10.1.0.1:9090": 1}, weights(out.find(t, "east", echo8080))); diff != "" {
					t.Errorf("weights (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "localities",
			service: merged(export("east", "net-1", svc,
				pod("10.0.0.1", "r1", "z1", subzone("sz1")),
				pod("10.0.0.2", "r1", "z1"),
				pod("10.0.0.3", "r1", "z2"),
				pod("10.0.0.4", "r2", "z5"),
			)),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1")},
			views: []namedView{
				{"zone-z1", view("net-1", "r1", "z1", "")},
				{"subzone-sz1", view("net-1", "r1", "z1", "sz1")},
				{"zone-z9", view("net-1", "r1", "z9", "")},
				{"no-locality", view("net-1", "", "", "")},
			},
			check: func(t *testing.T, out *output) {
				t.Helper()
				for view, want := range map[string]map[string]uint32{
					"zone-z1":     {"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 1, "10.0.0.4": 2},
					"subzone-sz1": {"10.0.0.1": 0, "10.0.0.2": 1, "10.0.0.3": 1, "10.0.0.4": 2},
					"zone-z9":     {"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 0, "10.0.0.4": 1},
					"no-locality": {"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 0, "10.0.0.4": 0},
				} {
					if diff := cmp.Diff(want, priorities(out.find(t, view, echo8080))); diff != "" {
						t.Errorf("%s: priorities (-want +got):\n%s", view, diff)
					}
				}
			},
		},
		{
			name: "headless",
			service: merged(export("east", "net-1",
				withService(func(s *federationpb.Service) {
					s.Type = federationpb.ServiceType_SERVICE_TYPE_HEADLESS
					s.Ports = []*federationpb.ServicePort{{Name: "grpc", Protocol: tcp, Port: 9090, TargetPort: 9090}}
				}),
				pod("10.1.0.1", "r1", "z1"), pod("10.1.0.2", "r1", "z1"),
			)),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1")},
			views:    []namedView{{"z1", view("net-1", "r1", "z1", "")}},
		},
		{
			name: "mcs-two-hostnames",
			service: merged(
				export("east", "net-1", withService(func(s *federationpb.Service) {
					s.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT
				}), pod("10.1.0.1", "r1", "z1")),
				export("west", "net-1", svc, pod("10.2.0.1", "r1", "z2")),
			),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1"), cluster("west", "net-1")},
			views:    []namedView{{"z1", view("net-1", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				var names []string
				for _, c := range out.clusters {
					names = append(names, c.GetName())
				}
				want := []string{echo8080, "outbound|8080||echo.demo.svc.clusterset.local"}
				if diff := cmp.Diff(want, names); diff != "" {
					t.Errorf("cluster names (-want +got):\n%s", diff)
				}
				a, b := out.find(t, "z1", want[0]), out.find(t, "z1", want[1])
				if diff := cmp.Diff(a.GetEndpoints(), b.GetEndpoints(), protoCmp()); diff != "" {
					t.Errorf("both hostnames should have the same endpoints (-local +clusterset):\n%s", diff)
				}
			},
		},
		{
			// An MCS import's ClusterSetIPs: listeners a client that dials
			// xds:///<ip>:<port> asks for, routed as the clusterset hostname.
			name: "mcs-clusterset-ips",
			service: merged(
				export("east", "net-1", withService(func(s *federationpb.Service) {
					s.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT
				}), pod("10.1.0.1", "r1", "z1")),
			),
			vips:     addrs("240.242.0.5", "fd6d:6673:6574::5"),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1")},
			views:    []namedView{{"z1", view("net-1", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				var names []string
				for _, l := range out.listeners {
					names = append(names, l.GetName())
				}
				want := []string{"echo.demo.svc.cluster.local:8080", "echo.demo.svc.clusterset.local:8080", "240.242.0.5:8080", "[fd6d:6673:6574::5]:8080"}
				if diff := cmp.Diff(want, names); diff != "" {
					t.Errorf("listener names (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "readiness",
			service: merged(
				export("east", "net-east", svc,
					pod("10.1.0.1", "r1", "z1"),
					pod("10.1.0.2", "r1", "z1", notReady),
					pod("10.1.0.3", "r1", "z1", terminating),
					pod("10.1.0.4", "r1", "z1", terminated),
				),
				// Only a draining pod left: its gateway is DRAINING too.
				export("west", "net-west", svc, pod("10.2.0.1", "r1", "z1", terminating), pod("10.2.0.2", "r1", "z1", notReady)),
			),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-east"), cluster("west", "net-west", gateway("192.0.2.10", 15443, tls))},
			views:    []namedView{{"east", view("net-east", "r1", "z1", "")}, {"east-grpc", grpcView("net-east", "r1", "z1")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				if diff := cmp.Diff(map[string]string{
					"10.1.0.1:9090":    "HEALTHY",
					"10.1.0.3:9090":    "DRAINING",
					"192.0.2.10:15443": "DRAINING",
				}, health(out.find(t, "east", echo8080))); diff != "" {
					t.Errorf("health (-want +got):\n%s", diff)
				}
				// A gRPC client would ignore every draining entry.
				if diff := cmp.Diff(map[string]string{"10.1.0.1:9090": "HEALTHY"}, health(out.find(t, "east-grpc", echo8080))); diff != "" {
					t.Errorf("gRPC client's health (-want +got):\n%s", diff)
				}
			},
		},
		{
			// A locality holding only a draining endpoint is a priority of
			// its own: Envoy spills over it (none healthy); for a gRPC
			// client, which ignores DRAINING, it would be an empty priority
			// shifting every later one.
			name: "draining-priorities",
			service: merged(
				export("east", "net-east", svc, pod("10.1.0.1", "r1", "z1", terminating), pod("10.1.0.2", "r1", "z2")),
				export("west", "net-west", svc, pod("10.2.0.1", "r2", "z9")),
			),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-east"), cluster("west", "net-west", gateway("192.0.2.10", 15443, tls))},
			views:    []namedView{{"envoy", view("net-east", "r1", "z1", "")}, {"grpc", grpcView("net-east", "r1", "z1")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				if diff := cmp.Diff(map[string]uint32{"10.1.0.1": 0, "10.1.0.2": 1, "192.0.2.10": 2}, priorities(out.find(t, "envoy", echo8080))); diff != "" {
					t.Errorf("Envoy's priorities (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(map[string]uint32{"10.1.0.2": 0, "192.0.2.10": 1}, priorities(out.find(t, "grpc", echo8080))); diff != "" {
					t.Errorf("gRPC client's priorities (-want +got):\n%s", diff)
				}
			},
		},
		{
			// An east-west gateway forwards only Istio mTLS: endpoints that
			// take plaintext weigh nothing behind it, and a network with
			// only such has no gateway entry at all.
			name: "plaintext-behind-gateway",
			service: merged(
				export("east", "net-east", svc, pod("10.1.0.1", "r1", "z1")),
				export("west", "net-west", svc, pod("10.2.0.1", "r1", "z1"), pod("10.2.0.2", "r1", "z1"), pod("10.2.0.3", "r1", "z1", plaintext)),
				export("south", "net-south", svc, pod("10.3.0.1", "r1", "z1", plaintext)),
			),
			clusters: []*clusterset.ClusterInfo{
				cluster("east", "net-east"),
				cluster("west", "net-west", gateway("192.0.2.10", 15443, tls)),
				cluster("south", "net-south", gateway("192.0.2.30", 15443, tls)),
			},
			views: []namedView{{"east", view("net-east", "r1", "z1", "")}, {"west", view("net-west", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				if diff := cmp.Diff(map[string]uint32{"10.1.0.1:9090": 1, "192.0.2.10:15443": 2}, weights(out.find(t, "east", echo8080))); diff != "" {
					t.Errorf("east's weights (-want +got):\n%s", diff)
				}
				// On its own network a plaintext endpoint is reached directly.
				if w := weights(out.find(t, "west", echo8080)); w["10.2.0.3:9090"] != 1 {
					t.Errorf("west's weights %v lack its own plaintext endpoint", w)
				}
			},
		},
		{
			// A gateway standing for several equally near localities goes
			// into the one holding most of its endpoints, not the smallest
			// name, which may be the unlabelled locality of direct
			// endpoints.
			name: "gateway-locality",
			service: merged(
				export("east", "net-east", svc, pod("10.1.0.1", "", "")),
				export("west", "net-west", svc, pod("10.2.0.1", "", ""), pod("10.2.0.2", "r2", "z3"), pod("10.2.0.3", "r2", "z3")),
			),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-east"), cluster("west", "net-west", gateway("192.0.2.10", 15443, tls))},
			views:    []namedView{{"anywhere", view("net-east", "", "", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				cla := out.find(t, "anywhere", echo8080)
				forEachEndpoint(cla, func(l *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
					if hostPort(e) == "192.0.2.10:15443" && (l.GetLocality().GetRegion() != "r2" || l.GetLocality().GetZone() != "z3") {
						t.Errorf("the gateway is in locality %v, want r2/z3", l.GetLocality())
					}
				})
			},
		},
		{
			name: "missing-port",
			service: merged(export("east", "net-1", svc,
				pod("10.1.0.1", "r1", "z1"),
				pod("10.1.0.2", "r1", "z1", ports(&federationpb.EndpointPort{Name: "http", Protocol: tcp, Port: 8000})),
				pod("10.1.0.3", "r1", "z1", ports(&federationpb.EndpointPort{Name: "grpc", Protocol: udp, Port: 9090})),
				pod("10.1.0.4", "r1", "z1", ports()),
			)),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1")},
			views:    []namedView{{"z1", view("net-1", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				if diff := cmp.Diff(map[string]uint32{"10.1.0.1:9090": 1}, weights(out.find(t, "z1", echo8080))); diff != "" {
					t.Errorf("weights (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "unnamed-port",
			service: merged(export("east", "net-1",
				withService(func(s *federationpb.Service) {
					s.Ports = []*federationpb.ServicePort{{Protocol: tcp, Port: 80, TargetPort: 8000}}
				}),
				pod("10.1.0.1", "r1", "z1", ports(&federationpb.EndpointPort{Protocol: tcp, Port: 8000})),
				pod("10.1.0.2", "r1", "z1", ports(&federationpb.EndpointPort{Name: "http", Protocol: tcp, Port: 8001})),
				pod("10.1.0.3", "r1", "z1", ports(&federationpb.EndpointPort{Name: "a", Protocol: tcp, Port: 1}, &federationpb.EndpointPort{Name: "b", Protocol: tcp, Port: 2})),
			)),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1")},
			views:    []namedView{{"z1", view("net-1", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				if diff := cmp.Diff(map[string]uint32{"10.1.0.1:8000": 1, "10.1.0.2:8001": 1}, weights(out.find(t, "z1", "outbound|80||"+echoHost))); diff != "" {
					t.Errorf("weights (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "multi-port-with-udp",
			service: merged(export("east", "net-1",
				withService(func(s *federationpb.Service) {
					s.Ports = []*federationpb.ServicePort{
						grpcPort(),
						{Name: "dns", Protocol: udp, Port: 53},
						{Name: "metrics", Protocol: tcp, Port: 9100},
					}
				}),
				pod("10.1.0.1", "r1", "z1", ports(
					&federationpb.EndpointPort{Name: "grpc", Protocol: tcp, Port: 9090},
					&federationpb.EndpointPort{Name: "dns", Protocol: udp, Port: 5353},
				)),
			)),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-1")},
			views:    []namedView{{"z1", view("net-1", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				var names []string
				for _, l := range out.listeners {
					names = append(names, l.GetName())
				}
				if diff := cmp.Diff([]string{echoHost + ":8080", echoHost + ":9100"}, names); diff != "" {
					t.Errorf("listeners (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "gateway-network-override",
			service: merged(
				export("east", "net-east", svc,
					pod("10.1.0.1", "r1", "z1"),
					pod("10.9.0.1", "r1", "z2", func(e *federationpb.Endpoint) { e.Network = "net-edge" }),
				),
			),
			clusters: []*clusterset.ClusterInfo{cluster("east", "net-east",
				gateway("192.0.2.1", 15443, tls),
				onNetwork(gateway("192.0.2.9", 15443, tls), "net-edge"),
			)},
			views: []namedView{
				{"east", view("net-east", "r1", "z1", "")},
				{"edge", view("net-edge", "r1", "z2", "")},
			},
			check: func(t *testing.T, out *output) {
				t.Helper()
				if diff := cmp.Diff(map[string]uint32{"10.1.0.1:9090": 1, "192.0.2.9:15443": 1}, weights(out.find(t, "east", echo8080))); diff != "" {
					t.Errorf("east weights (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(map[string]uint32{"10.9.0.1:9090": 1, "192.0.2.1:15443": 1}, weights(out.find(t, "edge", echo8080))); diff != "" {
					t.Errorf("edge weights (-want +got):\n%s", diff)
				}
			},
		},
		{
			// A stale cluster's endpoints come after every live one's,
			// ordered by proximity among themselves; a locality with both
			// appears once in each tier. A network with only stale
			// clusters is reached through its gateways in the stale tier.
			name: "stale-clusters",
			service: merged(
				export("east", "net-1", svc, pod("10.1.0.1", "r1", "z1"), pod("10.1.0.2", "r2", "z3")),
				stale(export("north", "net-1", svc, pod("10.3.0.1", "r1", "z1"), pod("10.3.0.2", "r1", "z2"))),
				stale(export("west", "net-2", svc, pod("10.2.0.1", "r1", "z1"))),
			),
			clusters: []*clusterset.ClusterInfo{
				cluster("east", "net-1"), cluster("north", "net-1"),
				cluster("west", "net-2", gateway("192.0.2.10", 15443, tls)),
			},
			views: []namedView{{"net-1-z1", view("net-1", "r1", "z1", "")}},
			check: func(t *testing.T, out *output) {
				t.Helper()
				want := map[string]uint32{
					"10.1.0.1": 0, "10.1.0.2": 1, // live: same zone, elsewhere
					"10.3.0.1": 2, "192.0.2.10": 2, // stale, same zone (west's gateway stands for z1)
					"10.3.0.2": 3, // stale, same region
				}
				if diff := cmp.Diff(want, priorities(out.find(t, "net-1-z1", echo8080))); diff != "" {
					t.Errorf("priorities (-want +got):\n%s", diff)
				}
			},
		},
	}
}

func addrs(ips ...string) []netip.Addr {
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = netip.MustParseAddr(ip)
	}
	return out
}

func TestGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			out := generate(t, c)
			checkOutput(t, out)
			if c.check != nil {
				c.check(t, out)
			}
			got := render(t, out)
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./xds/resources -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs (-want +got); rerun with -update if intended:\n%s", path, diff)
			}
			// Pure and deterministic: a second run gives the same bytes.
			if again := render(t, generate(t, c)); !bytes.Equal(got, again) {
				t.Error("a second generation differs from the first")
			}
		})
	}
}

// render encodes out as indented JSON. protojson's own whitespace is
// deliberately unstable, so each message is compacted and the whole
// document re-indented by encoding/json; protojson already emits fields in
// number order and map keys sorted.
func render(t *testing.T, out *output) []byte {
	t.Helper()
	type cla struct {
		View       string          `json:"view"`
		Assignment json.RawMessage `json:"assignment"`
	}
	doc := struct {
		Clusters        []json.RawMessage `json:"clusters"`
		Listeners       []json.RawMessage `json:"listeners"`
		Routes          []json.RawMessage `json:"routes"`
		LoadAssignments []cla             `json:"loadAssignments"`
	}{}
	enc := func(m proto.Message) json.RawMessage {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, m := range out.clusters {
		doc.Clusters = append(doc.Clusters, enc(m))
	}
	for _, m := range out.listeners {
		doc.Listeners = append(doc.Listeners, enc(m))
	}
	for _, m := range out.routes {
		doc.Routes = append(doc.Routes, enc(m))
	}
	for _, a := range out.assignments {
		doc.LoadAssignments = append(doc.LoadAssignments, cla{a.view, enc(a.cla)})
	}
	compact, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, compact, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// serviceOutput decodes the CDS, LDS and RDS resources of s, whose
// import's ClusterSetIPs are vips.
func serviceOutput(t testing.TB, s *clusterset.ServiceView, vips []netip.Addr) *output {
	t.Helper()
	return &output{
		clusters:  decodeAll[clusterv3.Cluster](t, EncodeClusters(s)),
		listeners: decodeAll[listenerv3.Listener](t, EncodeListeners(s, vips)),
		routes:    decodeAll[routev3.RouteConfiguration](t, EncodeRoutes(s, vips)),
	}
}

// decodeAll decodes encoded resources, checking that each is named as the
// message it holds.
func decodeAll[M any, P interface {
	*M
	proto.Message
	GetName() string
}](t testing.TB, encoded []Encoded) []P {
	t.Helper()
	out := make([]P, 0, len(encoded))
	for _, e := range encoded {
		m := P(new(M))
		if err := proto.Unmarshal(e.Value, m); err != nil {
			t.Fatalf("%s: the encoding does not decode: %v", e.Name, err)
		}
		if m.GetName() != e.Name {
			t.Fatalf("resource %q holds a %T named %q", e.Name, m, m.GetName())
		}
		out = append(out, m)
	}
	return out
}

func protoCmp() cmp.Option { return protocmp.Transform() }

// weights maps "address:port" to the endpoint's weight.
func weights(cla *endpointv3.ClusterLoadAssignment) map[string]uint32 {
	out := map[string]uint32{}
	forEachEndpoint(cla, func(_ *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
		out[hostPort(e)] = e.GetLoadBalancingWeight().GetValue()
	})
	return out
}

// priorities maps an address to its locality's priority.
func priorities(cla *endpointv3.ClusterLoadAssignment) map[string]uint32 {
	out := map[string]uint32{}
	forEachEndpoint(cla, func(l *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
		out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = l.GetPriority()
	})
	return out
}

func health(cla *endpointv3.ClusterLoadAssignment) map[string]string {
	out := map[string]string{}
	forEachEndpoint(cla, func(_ *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
		out[hostPort(e)] = e.GetHealthStatus().String()
	})
	return out
}

func assertNoAddressIn(t *testing.T, cla *endpointv3.ClusterLoadAssignment, cidr string) {
	t.Helper()
	prefix := netip.MustParsePrefix(cidr)
	forEachEndpoint(cla, func(_ *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
		a, err := netip.ParseAddr(e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		if err != nil || prefix.Contains(a) {
			t.Errorf("%s: endpoint %s should not be visible (in %s)", cla.GetClusterName(), hostPort(e), cidr)
		}
	})
}
