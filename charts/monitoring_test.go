package charts_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// description, and an expression selecting the release's namespace (that
// each expression parses is charts/promql's to check).
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

// monitoringGolden holds every PromQL expression of the hub chart's
// dashboard and alerts, by where each is: the module charts/promql parses
// each with Prometheus's own parser and checks that a real hub exports
// every metric it reads (Prometheus's packages stay out of this module's
// graph).
const monitoringGolden = "testdata/monitoring-expressions.golden.json"

// TestMonitoringExpressions keeps monitoringGolden the chart's: run it
// with -update after a change to the dashboard or the alerts.
func TestMonitoringExpressions(t *testing.T) {
	h := newHelm(t)
	exprs := monitoringExprs(t, parse(t, renderChart(t, h, "hub-monitoring", "meshfed-hub")))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the expressions' < and > as they are
	enc.SetIndent("", "  ")
	if err := enc.Encode(exprs); err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	if *update {
		if err := os.WriteFile(monitoringGolden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(monitoringGolden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is not the chart's (run with -update) (-file +chart):\n%s", monitoringGolden, diff)
	}
}
