//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/xds"
)

// histogram reads a histogram's count and sum from the hub's /metrics,
// for the series whose labels contain every one of want ("name=value").
func histogram(t *testing.T, debugAddr, name string, want ...string) (count uint64, sum float64) {
	t.Helper()
	code, body := httpGet(t.Context(), "http://"+debugAddr+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := families[name]
	if !ok {
		return 0, 0
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			match = match && labels[k] == v
		}
		if match {
			count += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return count, sum
}

// TestPropagationLatencyIsMeasured: an endpoint change in a cluster is
// timed from the spoke observing it to the proxy ACKing the response that
// brought it; the proxy's initial state is not a propagation.
func TestPropagationLatencyIsMeasured(t *testing.T) {
	f := startXDSFleet(t)
	east := []backend{startBackend(t, "127.0.0.35", "east")}
	f.cluster(t, "east", "net1", "z-east", nil, east...)
	c := xdsClient(t, f.hub.XDSAddr().String(), "client-prop", "east", "net1", "r-east", "z-east")
	eventually(t, c, "east")
	debug := f.hub.DebugAddr().String()
	eds := "type=ClusterLoadAssignment"
	if n, _ := histogram(t, debug, "meshfed_propagation_seconds", eds); n != 0 {
		t.Fatalf("%d propagations measured before any change: the initial state is not one", n)
	}
	synced := func(version string) bool {
		for _, p := range f.hub.XDS().Proxies() {
			if ts, ok := p.Types["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"]; ok && p.Kind == "grpc" &&
				ts.State == xds.StateSynced && ts.AckedVersion != version {
				return true
			}
		}
		return false
	}
	var before string
	for _, p := range f.hub.XDS().Proxies() {
		before = p.Types["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"].AckedVersion
	}

	// Three changes, each ACKed before the next.
	for i := range 3 {
		more := append([]backend{}, east...)
		more = append(more, startBackend(t, fmt.Sprintf("127.0.0.%d", 36+i), "east"))
		f.setEndpoints("east", "net1", "z-east", nil, more...)
		testwait.For(t, "the proxy to ACK the change", func() bool { return synced(before) })
		for _, p := range f.hub.XDS().Proxies() {
			before = p.Types["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"].AckedVersion
		}
		testwait.For(t, "the change counted", func() bool {
			n, _ := histogram(t, debug, "meshfed_propagation_seconds", eds, "kind=grpc")
			return n >= uint64(i+1)
		})
	}
	n, sum := histogram(t, debug, "meshfed_propagation_seconds", eds, "kind=grpc")
	if n != 3 {
		t.Errorf("%d propagations measured for 3 changes", n)
	}
	// On loopback a change reaches the proxy within milliseconds; a
	// second would mean the time is read from the wrong end.
	t.Logf("%d propagations, mean %.2f ms", n, 1000*sum/float64(n))
	if mean := sum / float64(n); mean <= 0 || mean > 1 {
		t.Errorf("mean propagation %.3fs", mean)
	}
	if got, _ := histogram(t, debug, "meshfed_hub_ingest_delay_seconds"); got == 0 {
		t.Error("no ingest delay recorded")
	}
}
