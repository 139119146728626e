// Package charts_test lints and renders the Helm charts with the helm pinned
// in tools/go.mod, compares the output with golden files and checks
// invariants of the rendered objects.
//
// Refresh the golden files with: go test ./charts -update
package charts_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the rendered charts")

const (
	namespace = "meshfed"
	// image.repository and the charts' appVersion, per chart.
	hubImage, spokeImage = "meshfed/meshfed-hub:0.1.0", "meshfed/meshfed-spoke:0.1.0"
	tlsDir               = "/etc/meshfed/tls"
)

type renderCase struct {
	name    string // testdata/<name>.values.yaml, testdata/<name>.golden
	chart   string // directory under charts/, also the release name
	wantErr string // when set, helm template must fail with this in its error
	check   func(t *testing.T, r rendered)
}

func TestCharts(t *testing.T) {
	h := newHelm(t)
	cases := []renderCase{
		{name: "hub-defaults", chart: "meshfed-hub", check: checkHubDefaults},
		{name: "hub-ha-xds", chart: "meshfed-hub", check: checkHubHAXDS},
		{name: "hub-single", chart: "meshfed-hub", check: checkHubSingle},
		{name: "hub-user-affinity", chart: "meshfed-hub", check: checkHubUserAffinity},
		{name: "hub-podmonitor", chart: "meshfed-hub", check: checkPodMonitor},
		{name: "hub-monitoring", chart: "meshfed-hub", check: checkHubMonitoring},
		{name: "hub-services", chart: "meshfed-hub", check: checkHubServicesOptions},
		{name: "spoke-podmonitor", chart: "meshfed-spoke", check: checkPodMonitor},
		{name: "hub-loopback-debug", chart: "meshfed-hub", wantErr: `debug.host "127.0.0.1" is loopback-only`},
		{name: "hub-xds-no-tls", chart: "meshfed-hub", wantErr: "xds.enabled needs xds.tls.secretName"},
		{name: "hub-bad-anti-affinity", chart: "meshfed-hub", wantErr: `at '/podAntiAffinity': value must be one of 'soft', 'hard', 'none'`},
		{name: "hub-bad-replicas", chart: "meshfed-hub", wantErr: `at '/replicaCount': got string, want integer`},
		{name: "hub-bad-unknown-key", chart: "meshfed-hub", wantErr: `at '/xds': additional properties 'enable' not allowed`},
		{name: "hub-bad-cert-manager", chart: "meshfed-hub", wantErr: `at '/certManager/issuerRef/name': minLength: got 0, want 1`},
		{name: "hub-bad-log-level", chart: "meshfed-hub", wantErr: `at '/log/level': value must be one of 'debug', 'info', 'warn', 'error'`},
		{name: "spoke-bad-gateway-namespace", chart: "meshfed-spoke", wantErr: `at '/gatewayNamespaces/0'`},
		{name: "spoke-bad-export", chart: "meshfed-spoke", wantErr: `at '/export': value must be one of 'exported', 'all'`},
		{name: "spoke-bad-kind", chart: "meshfed-spoke", wantErr: `at '/kind': value must be one of 'Deployment', 'DaemonSet'`},
		{name: "spoke-daemonset", chart: "meshfed-spoke", check: checkSpokeDaemonSet},
		{name: "spoke-replicas", chart: "meshfed-spoke", check: checkSpokeReplicas},
		{name: "spoke", chart: "meshfed-spoke", check: checkSpoke},
		{name: "spoke-hub-list", chart: "meshfed-spoke", check: checkSpokeHubList},
		{name: "spoke-mcp", chart: "meshfed-spoke", check: checkSpokeMCP},
		{name: "spoke-about", chart: "meshfed-spoke", check: checkSpokeAbout},
		{name: "spoke-bad-mcp-replicas", chart: "meshfed-spoke", wantErr: "mcp.enabled needs a single spoke pod"},
		{name: "spoke-remote-views", chart: "meshfed-spoke", check: checkSpokeRemoteViews},
		{name: "spoke-bad-remote-views-replicas", chart: "meshfed-spoke", wantErr: "remoteViews.enabled needs a single spoke pod"},
		{name: "spoke-bad-remote-views-secrets", chart: "meshfed-spoke", wantErr: "remoteViews.tlsSecretName is required"},
		{
			name: "spoke-bad-hub-list", chart: "meshfed-spoke",
			wantErr: `"hub-b.example.com" is not host:port`,
		},
		{
			name: "spoke-missing-cluster-id", chart: "meshfed-spoke",
			wantErr: "clusterID is required: set it to this cluster's ID",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			values := filepath.Join("testdata", c.name+".values.yaml")
			if c.wantErr == "" {
				// --strict fails on lint warnings too.
				if out, err := h.run(t, "lint", "--strict", "--namespace", namespace, "--values", values, c.chart); err != nil {
					t.Fatalf("helm lint --strict %s: %v\n%s", c.chart, err, out)
				}
			}
			out, err := h.run(t, "template", c.chart, c.chart, "--namespace", namespace, "--values", values)
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("helm template succeeded; want an error containing %q", c.wantErr)
				}
				if !strings.Contains(out, c.wantErr) {
					t.Fatalf("helm template failed with\n%s\nwant an error containing %q", out, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			compareGolden(t, filepath.Join("testdata", c.name+".golden"), out)
			r := parse(t, out)
			checkCommon(t, r)
			c.check(t, r)
		})
	}
}

// helm runs the helm binary that tools/go.mod pins.
type helm struct {
	path, dir string
	env       []string
}

// newHelm builds helm through `go tool` (the build cache keeps the binary, so
// only the first run after a change of tools/go.mod builds it) and returns a
// runner that calls it directly from charts/, with its state in a temporary
// directory.
func newHelm(t *testing.T) helm {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	modfile := filepath.Join(root, "tools", "go.mod")
	if _, err := os.Stat(modfile); err != nil {
		t.Fatalf("tools/go.mod not found from the test's directory: %v", err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds helm: %v", err)
	}
	// -n prints the cached executable's path instead of running it, after
	// building it when needed.
	cmd := exec.CommandContext(t.Context(), gobin, "tool", "-modfile="+modfile, "-n", "helm")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool -modfile=tools/go.mod -n helm: %v\n%s", err, stderr.Bytes())
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("go tool -n helm printed %q: %v", path, err)
	}

	home := t.TempDir()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "HELM_") })
	env = append(env,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	return helm{path: path, dir: filepath.Join(root, "charts"), env: env}
}

// run returns helm's stdout, followed by its stderr when it fails.
func (h helm) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), h.path, args...)
	cmd.Dir, cmd.Env = h.dir, h.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is missing: run go test ./charts -update", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")); diff != "" {
		t.Errorf("rendered chart differs from %s (-want +got); if the change is intended, run go test ./charts -update:\n%s", path, diff)
	}
}
