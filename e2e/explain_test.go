//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/xds"
)

// explain asks the hub's /debug/explain, as `meshfed explain` does.
func explain(t *testing.T, debugAddr, proxy, service, endpoint string) xds.Explanation {
	t.Helper()
	q := url.Values{"proxy": {proxy}, "service": {service}}
	if endpoint != "" {
		q.Set("endpoint", endpoint)
	}
	code, body := httpGet(t.Context(), "http://"+debugAddr+"/debug/explain?"+q.Encode())
	if code != 200 {
		t.Fatalf("GET /debug/explain: %d %s", code, body)
	}
	var ex xds.Explanation
	if err := json.Unmarshal([]byte(body), &ex); err != nil {
		t.Fatal(err)
	}
	return ex
}

// verdictOf returns the verdict and detail of the first step whose name
// starts with step.
func verdictOf(ex xds.Explanation, step string) (string, string) {
	for _, s := range ex.Steps {
		if strings.HasPrefix(s.Step, step) {
			return s.Verdict, s.Detail
		}
	}
	return "", ""
}

func TestExplain(t *testing.T) {
	f := startXDSFleet(t)
	east := startBackend(t, "127.0.0.61", "east")
	west := startBackend(t, "127.0.0.71", "west")
	gw := startBackend(t, "127.0.0.80", "west-gateway")
	f.cluster(t, "east", "net-a", "z-east", nil, east)
	f.cluster(t, "west", "net-b", "z-west", []*federationpb.Gateway{{
		Address: gw.addr, Port: gw.port, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS,
	}}, west)
	c := xdsClient(t, f.hub.XDSAddr().String(), "client-x", "east", "net-a", "r-east", "z-east")
	eventually(t, c, "east")
	debug := f.hub.DebugAddr().String()
	const svc = "echo.demo.svc.cluster.local:8080"
	// The client ACKs the assignment it uses; explain reads the book.
	testwait.For(t, "the client synced", func() bool {
		ex := explain(t, debug, "client-x", svc, east.addr)
		return ex.Sees
	})

	for _, tc := range []struct {
		name, proxy, service, endpoint string
		sees                           bool
		step, verdict, detail          string
	}{
		{"an endpoint on the proxy's network", "client-x", svc, east.addr, true, "assignment", xds.VerdictOK, "priority 0"},
		{"an endpoint behind its network's gateway", "client-x", svc, west.addr, true, "network", xds.VerdictOK, "reached through the gateways " + gw.addr},
		{"the clusterset hostname", "client-x", "echo.demo.svc.clusterset.local:8080", "", false, "subscription", xds.VerdictNo, "not outbound|8080||echo.demo.svc.clusterset.local"},
		{"an unknown proxy", "nobody", svc, "", false, "proxy", xds.VerdictNo, "no proxy"},
		{"an unexported service", "client-x", "nope.demo.svc.cluster.local:80", "", false, "service", xds.VerdictNo, "not exported"},
		{"a port the service lacks", "client-x", "echo.demo.svc.cluster.local:9999", "", false, "port", xds.VerdictNo, "no TCP port 9999"},
		{"an address no cluster publishes", "client-x", svc, "10.9.9.9", false, "endpoint", xds.VerdictNo, "no exporting cluster publishes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := explain(t, debug, tc.proxy, tc.service, tc.endpoint)
			verdict, detail := verdictOf(ex, tc.step)
			if ex.Sees != tc.sees || verdict != tc.verdict || !strings.Contains(detail, tc.detail) {
				b, _ := json.MarshalIndent(ex, "", "  ")
				t.Errorf("sees %v, %s: %s %q; want sees %v, %s %q\n%s", ex.Sees, tc.step, verdict, detail, tc.sees, tc.verdict, tc.detail, b)
			}
		})
	}

	// West's pod turns not ready; then west's gateway goes.
	tr := f.trackers["west"]
	tr.Update(time.Now(), true, func(w shard.Writer) {
		must(w.SetEndpoints("demo/echo", []*federationpb.Endpoint{{
			Namespace: "demo", Service: "echo", Address: west.addr,
			Ports: []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: west.port}},
		}}))
	})
	testwait.For(t, "explain to see west's endpoint not ready", func() bool {
		v, _ := verdictOf(explain(t, debug, "client-x", svc, west.addr), "endpoint")
		return v == xds.VerdictNo
	})
	f.setEndpoints("west", "net-b", "z-west", nil, west)
	testwait.For(t, "explain to see no gateway into net-b", func() bool {
		v, d := verdictOf(explain(t, debug, "client-x", svc, west.addr), "network")
		return v == xds.VerdictNo && strings.Contains(d, "unreachable")
	})
}
