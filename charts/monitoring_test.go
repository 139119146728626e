package charts_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/examples/demo"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/spoke"
)

// prometheusRule is the part of a Prometheus Operator PrometheusRule the
// hub chart sets.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// grafanaDashboard is the part of the dashboard the tests read.
type grafanaDashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// monitoringAlerts are the alerts the hub chart's PrometheusRule must have.
var monitoringAlerts = []string{
	"MeshfedClusterStale", "MeshfedClusterWithdrawn", "MeshfedClusterUpdatesRejected", "MeshfedClusterPolicyRefusals",
	"MeshfedClusterPolicyReloadRefused", "MeshfedSpokeStreamsTakenOver", "MeshfedTwoSpokesForOneCluster",
	"MeshfedProxiesRejectConfiguration", "MeshfedProxiesBehind", "MeshfedClustersetIPPoolExhausted", "MeshfedCertificateExpiresSoon",
	"MeshfedCertificateExpiresVerySoon",
}

// checkHubMonitoring: the dashboard ConfigMap carries the sidecar's label
// and the chart's dashboard file as it is; the PrometheusRule has every
// alert, each with a severity, the extra labels, a summary and a
// description, and an expression selecting the release's namespace.
func checkHubMonitoring(t *testing.T, r rendered) {
	t.Helper()
	checkPodMonitor(t, r)
	d := dashboardOf(t, r)
	if d.UID != "meshfed-hub" || len(d.Panels) == 0 {
		t.Errorf("dashboard %q (uid %q) with %d panels", d.Title, d.UID, len(d.Panels))
	}
	cm := r.configMaps[0]
	if cm.Annotations["grafana_folder"] != "meshfed" {
		t.Errorf("the dashboard's ConfigMap has annotations %v, want the values' grafana_folder", cm.Annotations)
	}
	want, err := os.ReadFile(filepath.Join("meshfed-hub", "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["meshfed-hub.json"]; got != strings.TrimSuffix(string(want), "\n") {
		t.Errorf("the ConfigMap's dashboard differs from files/dashboard.json:\n%s", cmp.Diff(string(want), got))
	}

	if len(r.prometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules, want one", len(r.prometheusRules))
	}
	pr := r.prometheusRules[0]
	if pr.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v, want the values' release label", pr.Labels)
	}
	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, rule := range g.Rules {
			alerts = append(alerts, rule.Alert)
			if s := rule.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q", rule.Alert, s)
			}
			if rule.Labels["team"] != "mesh" {
				t.Errorf("%s: labels %v lack the values' additionalLabels", rule.Alert, rule.Labels)
			}
			if rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				t.Errorf("%s: annotations %v, want a summary and a description", rule.Alert, rule.Annotations)
			}
			if !strings.Contains(rule.Expr, `namespace="meshfed"`) {
				t.Errorf("%s: %s does not select the release's namespace", rule.Alert, rule.Expr)
			}
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(rule.Expr); err != nil {
				t.Errorf("%s: %s: %v", rule.Alert, rule.Expr, err)
			}
		}
	}
	if !slices.Equal(alerts, monitoringAlerts) {
		t.Errorf("alerts %q, want %q", alerts, monitoringAlerts)
	}
}

// dashboardOf returns the rendering's one dashboard, from its one
// ConfigMap.
func dashboardOf(t *testing.T, r rendered) grafanaDashboard {
	t.Helper()
	if len(r.configMaps) != 1 {
		t.Fatalf("%d ConfigMaps, want the dashboard's", len(r.configMaps))
	}
	cm := r.configMaps[0]
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s has labels %v, want grafana_dashboard: \"1\" for Grafana's sidecar", cm.Name, cm.Labels)
	}
	var d grafanaDashboard
	if err := json.Unmarshal([]byte(cm.Data["meshfed-hub.json"]), &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	return d
}

// grafanaMacros stand in for the range macros Grafana replaces before a
// query reaches Prometheus.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "3h")

// labelValues matches a Grafana variable query label_values(SELECTOR, LABEL).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

// monitoringExprs returns every PromQL expression of the rendering's
// dashboard (its panels' and its variables' selectors) and alerts, by
// where each is.
func monitoringExprs(t *testing.T, r rendered) map[string]string {
	t.Helper()
	out := map[string]string{}
	d := dashboardOf(t, r)
	for _, p := range d.Panels {
		for i, target := range p.Targets {
			out["panel "+p.Title+" #"+string(rune('A'+i))] = grafanaMacros.Replace(target.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		out["variable "+v.Name] = m[1]
	}
	for _, g := range r.prometheusRules[0].Spec.Groups {
		for _, rule := range g.Rules {
			out["alert "+rule.Alert] = rule.Expr
		}
	}
	return out
}

// TestMonitoringMetricsExist: every metric the dashboard and the alerts
// read is one a real hub exports. It parses each expression with
// Prometheus's own PromQL parser, then runs a hub (TLS, a cluster policy,
// xDS: everything that adds metrics) with two spokes streaming the demo's
// clusters, so that the per-cluster series exist, and reads its /metrics.
func TestMonitoringMetricsExist(t *testing.T) {
	h := newHelm(t)
	r := parse(t, renderChart(t, h, "hub-monitoring", "meshfed-hub"))
	used := map[string][]string{} // metric → where
	p := parser.NewParser(parser.Options{})
	for where, expr := range monitoringExprs(t, r) {
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

// hubMetricNames runs a hub and two spokes and returns the names of the
// series in the hub's /metrics (a histogram's _bucket, _sum and _count).
func hubMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := pki.WriteLocal(certs, "cluster.local", []string{"east", "west"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(policyFile, []byte("clusters:\n- id: east\n  networks: [network-east]\n- id: west\n  networks: [network-west]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "manifests"), demo.Manifests); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	cfg := hub.DefaultConfig()
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key"), filepath.Join(certs, "ca.crt")
	cfg.XDSCertFile, cfg.XDSKeyFile = cfg.CertFile, cfg.KeyFile
	cfg.ClustersConfig = policyFile
	hb, err := hub.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 3)
	running := 1
	go func() { done <- hb.Run(ctx) }()
	defer func() {
		cancel()
		for range running {
			if err := <-done; err != nil {
				t.Errorf("hub or spoke: %v", err)
			}
		}
	}()
	for _, id := range []string{"east", "west"} {
		scfg := spoke.DefaultConfig()
		scfg.ClusterID, scfg.Network, scfg.Hub, scfg.ServerName = id, "network-"+id, hb.FederationAddr().String(), "localhost"
		scfg.Manifests = filepath.Join(dir, "manifests", id)
		scfg.CertFile, scfg.KeyFile, scfg.CAFile = filepath.Join(certs, id+".crt"), filepath.Join(certs, id+".key"), filepath.Join(certs, "ca.crt")
		s, err := spoke.New(scfg, log)
		if err != nil {
			t.Fatal(err)
		}
		running++
		go func() { done <- s.Run(ctx) }()
	}
	// Both clusters synced, with a change each: every per-cluster series.
	poll(t, "the hub to have both clusters' changes", func() bool {
		n := 0
		for _, st := range hb.Registry().Status() {
			if st.Connected && !st.LastChangeAt.IsZero() {
				n++
			}
		}
		return n == 2
	}, nil)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+hb.DebugAddr().String()+"/metrics", nil)
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
