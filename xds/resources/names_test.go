package resources

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

func decodeHCM(t *testing.T, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
		t.Fatalf("listener %s: %v", l.GetName(), err)
	}
	return hcm
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{ClusterName(8080, "echo.demo.svc.cluster.local"), "outbound|8080||echo.demo.svc.cluster.local"},
		{ClusterName(65535, "a.b"), "outbound|65535||a.b"},
		{ListenerName("echo.demo.svc.cluster.local", 8080), "echo.demo.svc.cluster.local:8080"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestHostnames(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *clusterset.ServiceView
		want []string
	}{
		{"cluster-local only", &clusterset.ServiceView{Hostname: "a.ns.svc.cluster.local"}, []string{"a.ns.svc.cluster.local"}},
		{"mcs", &clusterset.ServiceView{Hostname: "a.ns.svc.cluster.local", ClustersetHostname: "a.ns.svc.clusterset.local"}, []string{"a.ns.svc.cluster.local", "a.ns.svc.clusterset.local"}},
		{"same twice", &clusterset.ServiceView{Hostname: "a.ns.svc.clusterset.local", ClustersetHostname: "a.ns.svc.clusterset.local"}, []string{"a.ns.svc.clusterset.local"}},
		{"none", &clusterset.ServiceView{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Hostnames(tc.s)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPorts(t *testing.T) {
	s := &clusterset.ServiceView{Ports: []*federationpb.ServicePort{
		{Name: "dns", Protocol: udp, Port: 53},
		{Name: "http", Port: 80}, // unspecified: TCP
		{Name: "sctp", Protocol: federationpb.Protocol_PROTOCOL_SCTP, Port: 90},
		{Name: "grpc", Protocol: tcp, Port: 8080},
		{Name: "grpc-sctp", Protocol: federationpb.Protocol_PROTOCOL_SCTP, Port: 8080},
	}}
	var got []string
	for _, p := range Ports(s) {
		got = append(got, p.GetName())
	}
	if diff := cmp.Diff([]string{"http", "grpc"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestViewKey(t *testing.T) {
	views := []View{
		{},
		view("n1", "", "", ""),
		view("n1", "r1", "z1", ""),
		view("n1", "r1", "z1", "s1"),
		view("n1/r1", "z1", "s1", ""), // a "/" must not collide with the separator
		view("n1", "r1/z1", "s1", ""),
	}
	seen := map[string]View{}
	for _, v := range views {
		k := v.Key()
		if prev, ok := seen[k]; ok {
			t.Errorf("%+v and %+v share key %q", prev, v, k)
		}
		seen[k] = v
		if v.Key() != k {
			t.Errorf("%+v: key is not stable", v)
		}
	}
	if got := view("net-a", "us-east1", "us-east1-b", "").Key(); got != "net-a/us-east1/us-east1-b/" {
		t.Errorf("readable key: got %q", got)
	}
}

// TestTypeURLsAreEnvoys: the hub's type URLs are go-control-plane's, which
// it does not link.
func TestTypeURLsAreEnvoys(t *testing.T) {
	for got, want := range map[string]string{
		ClusterType:  resourcev3.ClusterType,
		ListenerType: resourcev3.ListenerType,
		RouteType:    resourcev3.RouteType,
		EndpointType: resourcev3.EndpointType,
	} {
		if got != want {
			t.Errorf("type URL %q, want %q", got, want)
		}
	}
}

// TestHealthIsEnvoys: the health statuses the hub sends are numbered and
// named as Envoy's HealthStatus values, and any other prints as a number,
// as Envoy's enum prints a value it does not know.
func TestHealthIsEnvoys(t *testing.T) {
	for h, want := range map[Health]corev3.HealthStatus{
		HealthUnknown:  corev3.HealthStatus_UNKNOWN,
		HealthHealthy:  corev3.HealthStatus_HEALTHY,
		HealthDraining: corev3.HealthStatus_DRAINING,
		Health(99):     corev3.HealthStatus(99),
	} {
		if int32(h) != int32(want) || h.String() != want.String() {
			t.Errorf("Health %d %q, Envoy's %d %q", int32(h), h, int32(want), want)
		}
	}
}
