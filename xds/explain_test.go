package xds

import (
	"fmt"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/resources/reference"
)

// TestExplainEntry: what explain says of an entry is what the assignment
// proxies are sent says of it, read from the message (as Envoy's names
// print health statuses).
func TestExplainEntry(t *testing.T) {
	a := resources.LoadAssignment{
		ClusterName: "outbound|8080||echo.demo.svc.cluster.local",
		Localities: []resources.LocalityEndpoints{
			{Locality: resources.Locality{Region: "r1", Zone: "z1"}, Weight: 3, Endpoints: []resources.LbEndpoint{
				{Address: "10.1.0.1", Port: 9090, Health: resources.HealthHealthy, Weight: 1, Cluster: "east", Network: "n1"},
				{Address: "10.1.0.2", Port: 9090, Health: resources.HealthDraining, Weight: 2, Cluster: "east", Network: "n1"},
			}},
			{Locality: resources.Locality{Region: "r1", Zone: "z2", Subzone: "s1"}, Priority: 1, Weight: 7, Endpoints: []resources.LbEndpoint{
				{Address: "192.0.2.1", Port: 15443, Health: resources.HealthHealthy, Weight: 7, Network: "n2"},
			}},
		},
	}
	record := func(steps *[]Step) func(step, verdict, format string, args ...any) {
		return func(step, verdict, format string, args ...any) {
			*steps = append(*steps, Step{Step: step, Verdict: verdict, Detail: fmt.Sprintf(format, args...)})
		}
	}
	cla := reference.LoadAssignment(a)
	for _, addr := range []string{"10.1.0.1", "10.1.0.2", "192.0.2.1", "10.9.9.9"} {
		var got, want []Step
		gotOK := explainEntry(a, addr, record(&got))
		wantOK := explainMessage(cla, addr, record(&want))
		if gotOK != wantOK || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: explained as %v %q, the message says %v %q", addr, gotOK, got, wantOK, want)
		}
	}
	var steps []Step
	explainEntry(a, "10.1.0.2", record(&steps))
	if want := "10.1.0.2 at priority 0, locality r1/z1/, weight 2 of the locality's 3, DRAINING"; len(steps) != 1 || steps[0].Detail != want {
		t.Errorf("explained as %q, want %q", steps, want)
	}
}

// explainMessage is explainEntry over the message.
func explainMessage(cla *endpointv3.ClusterLoadAssignment, addr string, add func(step, verdict, format string, args ...any)) bool {
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			if e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != addr {
				continue
			}
			loc := l.GetLocality()
			add("assignment", VerdictOK, "%s at priority %d, locality %s/%s/%s, weight %d of the locality's %d, %s",
				addr, l.GetPriority(), loc.GetRegion(), loc.GetZone(), loc.GetSubZone(),
				e.GetLoadBalancingWeight().GetValue(), l.GetLoadBalancingWeight().GetValue(), e.GetHealthStatus())
			return true
		}
	}
	add("assignment", VerdictNo, "%s is not in the proxy's assignment: neither ready nor serving, or without the port", addr)
	return false
}

// TestExplainSubscription: a proxy that subscribes EDS by name, even to
// no name at all, watches only those names; a wildcard watches all.
func TestExplainSubscription(t *testing.T) {
	tg := target{hostname: "echo.demo.svc.cluster.local", port: &federationpb.ServicePort{Port: 8080}, cluster: "outbound|8080||echo.demo.svc.cluster.local"}
	proxy := &ProxyStatus{ID: "p1", Types: map[string]TypeStatus{resources.EndpointType: {State: StateSynced}}}
	for _, c := range []struct {
		name  string
		names []string
		all   bool
		want  string
	}{
		{"wildcard", nil, true, VerdictOK},
		{"by name", []string{tg.cluster}, false, VerdictOK},
		{"another name", []string{"outbound|80||other.demo.svc.cluster.local"}, false, VerdictNo},
		{"no name", nil, false, VerdictNo},
	} {
		e := explainer{
			subscribed: func(string, string) ([]string, bool) { return c.names, c.all },
			resources:  func(string, string) map[string]string { return nil },
		}
		x := &explanation{Explanation{Sees: true}}
		e.held(x, tg, proxy, resources.View{})
		if len(x.Steps) == 0 || x.Steps[0].Step != "subscription" || x.Steps[0].Verdict != c.want {
			t.Errorf("%s: explained as %q, want the subscription %s", c.name, x.Steps, c.want)
		}
	}
}
