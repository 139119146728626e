package promql

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/meshfed/meshfed/e2e/demofleet"
	"github.com/meshfed/meshfed/internal/testwait"
)

// TestMonitoringMetricsExist: every metric the dashboard and the alerts
// read is one a real hub exports. It parses each expression with
// Prometheus's own PromQL parser, then runs a hub (TLS, a cluster policy,
// xDS: everything that adds metrics) with two spokes streaming the demo's
// clusters, so that the per-cluster series exist, and reads its /metrics.
func TestMonitoringMetricsExist(t *testing.T) {
	data, err := os.ReadFile("../testdata/monitoring-expressions.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var exprs map[string]string
	if err := json.Unmarshal(data, &exprs); err != nil {
		t.Fatal(err)
	}
	if len(exprs) == 0 {
		t.Fatal("no expressions")
	}
	used := map[string][]string{} // metric → where
	p := parser.NewParser(parser.Options{})
	for where, expr := range exprs {
		e, err := p.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %s: %v", where, expr, err)
			continue
		}
		n := 0
		parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				if vs.Name == "" {
					t.Errorf("%s: a selector without a metric name: %s", where, vs)
				}
				used[vs.Name] = append(used[vs.Name], where)
				n++
			}
			return nil
		})
		if n == 0 {
			t.Errorf("%s: %s reads no metric", where, expr)
		}
	}

	exported := hubMetricNames(t)
	for _, name := range slices.Sorted(maps.Keys(used)) {
		if !exported[name] {
			t.Errorf("%s is not in the hub's /metrics; read by %s", name, strings.Join(slices.Sorted(slices.Values(used[name])), ", "))
		}
	}
	t.Logf("%d metrics read by the dashboard and the alerts, all exported", len(used))
}

// hubMetricNames runs the demo's hub and spokes and returns the names of
// the series in the hub's /metrics (a histogram's _bucket, _sum and
// _count), once both clusters' changes have reached it.
func hubMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	f := demofleet.Start(t)
	testwait.For(t, "the hub to have both clusters' changes", func() bool {
		n := 0
		for _, st := range f.Hub.Registry().Status() {
			if st.Connected && !st.LastChangeAt.IsZero() {
				n++
			}
		}
		return n == len(demofleet.Clusters)
	})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+f.Hub.DebugAddr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for line := range strings.Lines(string(body)) {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	return names
}
