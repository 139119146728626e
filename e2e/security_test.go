//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// gatewayManifest is an east-west gateway Service for network in
// namespace ns, reachable at addr.
func gatewayManifest(ns, name, network, addr string) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
  labels:
    topology.istio.io/network: %s
spec:
  type: ClusterIP
  externalIPs: [%q]
  ports:
    - name: tls
      port: 15443
      protocol: TCP
`, name, ns, network, addr)
}

// writePolicy replaces the cluster policy file as a ConfigMap volume
// would: a new file renamed over the old.
func writePolicy(t *testing.T, path, policy string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// metricLine returns the line of the hub's /metrics of series, or "". A
// series ending in "{" matches any labels.
func (h *procHub) metricLine(t *testing.T, series string) string {
	t.Helper()
	_, body := httpGet(t.Context(), "http://"+h.debug+"/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, series+" ") || strings.HasSuffix(series, "{") && strings.HasPrefix(line, series) {
			return line
		}
	}
	return ""
}

// TestProcessClusterPolicy runs a hub with a cluster policy file and
// spokes that try what the policy forbids, each a real process: a
// namespace user's gateway Service, a cluster claiming another network,
// an endpoint outside its cluster's CIDRs, a cluster the policy does not
// name. Each attempt fails, is counted and named, and leaves every
// cluster's last good state with the proxies. A reload admits a new
// cluster; an invalid edit is refused and the policy in force stays.
func TestProcessClusterPolicy(t *testing.T) {
	policyFile := filepath.Join(t.TempDir(), "clusters.yaml")
	const policy = `
clusters:
- id: east
  networks: [n1]
  cidrs:
    endpoints: [127.0.4.0/24]
    gateways: [127.0.4.0/24]
- id: west
  networks: [n2]
  cidrs:
    endpoints: [127.0.5.0/24]
`
	writePolicy(t, policyFile, policy)
	h := startProcHub(t, "--clusters-config", policyFile, "--clusters-config-interval", "100ms",
		"--xds-warmup", "5s", "--xds-warmup-quiet", "100ms")
	eastPod, westPod := startBackend(t, "127.0.4.1", "east"), startBackend(t, "127.0.5.1", "west")
	// East's platform team declares a gateway in istio-system; a namespace
	// user of east declares one for west's network in team-a.
	eastManifests := echoManifests("z-east", eastPod) +
		gatewayManifest("istio-system", "eastwest", "n1", "127.0.4.250") +
		gatewayManifest("team-a", "hijack", "n2", "127.0.4.251")
	east := startProcSpoke(t, h.federation, "east", "n1", eastManifests)
	startProcSpoke(t, h.federation, "west", "n2", echoManifests("z-west", westPod))
	h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.version > 0 })
	h.waitCluster(t, "west", time.Minute, func(c clusterRow) bool { return c.version > 0 })

	// A proxy of n1 (west's pods on n2 sit behind a gateway west has not
	// declared, so it sees east's).
	w := watchEDS(t, h.xds)
	w.until("east's endpoint", 30*time.Second, func(a map[uint32][]string) bool { return slices.Equal(a[0], []string{"127.0.4.1"}) })

	// The namespace user's Service is no gateway: only istio-system's is.
	if row := h.waitCluster(t, "east", time.Second, func(clusterRow) bool { return true }); row.gateways != 1 {
		t.Errorf("east has %d gateways; want only istio-system's (team-a's Service must be ignored)", row.gateways)
	}

	// East's spoke restarted with west's network: refused, named, counted;
	// east keeps n1 and west keeps its data.
	east.kill()
	east.args = replaceArg(east.args, "--network", "n2")
	east.start()
	row := h.waitCluster(t, "east", 30*time.Second, func(c clusterRow) bool { return c.refusals >= 1 })
	if !strings.Contains(row.nackReason, `network "n2" is not one of the cluster's`) || !strings.Contains(row.nackReason, "not allowed by the cluster policy") {
		t.Errorf("east's rejection reason %q does not name the field and the policy", row.nackReason)
	}
	if row.network != "n1" {
		t.Errorf("east's network is %q after the refused claim; want n1 kept", row.network)
	}
	if row := h.waitCluster(t, "west", time.Second, func(clusterRow) bool { return true }); row.network != "n2" || row.version == 0 {
		t.Errorf("west after east's claim: %+v; want its data intact", row)
	}
	if line := h.metricLine(t, `meshfed_hub_policy_refusals_total{cluster="east"}`); line == "" || strings.HasSuffix(line, " 0") {
		t.Errorf("east's refusals are not counted in /metrics: %q", line)
	}

	// Back on its own network, east publishes an endpoint outside its
	// CIDRs: refused; proxies keep east's last good endpoint.
	east.kill()
	east.args = replaceArg(east.args, "--network", "n1")
	east.start()
	h.waitCluster(t, "east", 30*time.Second, func(c clusterRow) bool { return c.connected && c.network == "n1" })
	before := h.waitCluster(t, "east", time.Second, func(clusterRow) bool { return true }).refusals
	east.write(t, echoManifests("z-east", eastPod, backend{addr: "127.0.9.9", port: eastPod.port}))
	row = h.waitCluster(t, "east", 30*time.Second, func(c clusterRow) bool { return c.refusals > before })
	if !strings.Contains(row.nackReason, "127.0.9.9 is outside the cluster's endpoint CIDRs") {
		t.Errorf("east's rejection reason %q does not name the address and CIDRs", row.nackReason)
	}
	// Fixed, the next change goes through; the proxy never saw the
	// refused address.
	east.write(t, echoManifests("z-east", eastPod, backend{addr: "127.0.4.2", port: eastPod.port}))
	_, pushes := w.until("east's next good change", 30*time.Second, func(a map[uint32][]string) bool {
		return slices.Equal(a[0], []string{"127.0.4.1", "127.0.4.2"})
	})
	if pushes != 0 {
		t.Errorf("%d EDS pushes between the refused update and the next good one; want none", pushes)
	}

	// A cluster the policy does not name is refused, and a reload admits it.
	northPod := startBackend(t, "127.0.6.1", "north")
	startProcSpoke(t, h.federation, "north", "n3", echoManifests("z-north", northPod))
	if !pollUntil(30*time.Second, func() bool {
		line := h.metricLine(t, `meshfed_hub_spoke_refusals_total{reason="not_admitted"}`)
		return line != "" && !strings.HasSuffix(line, " 0")
	}) {
		t.Fatal("north's stream was never refused")
	}
	for _, c := range h.clusters(t.Context()) {
		if c.id == "north" {
			t.Errorf("north, which the policy does not name, is listed: %+v", c)
		}
	}

	// An invalid edit is refused; the policy in force stays.
	writePolicy(t, policyFile, policy+"- id: north\n  networks: [n3]\n  cidr: {}\n")
	if !pollUntil(30*time.Second, func() bool {
		return strings.HasSuffix(h.metricLine(t, `meshfed_hub_cluster_policy_reloads_total{result="refused"}`), " 1")
	}) {
		t.Fatal("the invalid policy edit was not refused")
	}
	if log, _ := os.ReadFile(h.log); !strings.Contains(string(log), `unknown field \"cidr\"`) {
		t.Errorf("the hub's log does not say why the edit was refused:\n%s", h.tail())
	}
	writePolicy(t, policyFile, policy+"- id: north\n  networks: [n3]\n")
	h.waitCluster(t, "north", time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })
	if line := h.metricLine(t, `meshfed_hub_cluster_policy_reloads_total{result="applied"}`); !strings.HasSuffix(line, " 1") {
		t.Errorf("applied reloads: %q, want 1", line)
	}
}

// replaceArg returns args with the value after flag replaced by value.
func replaceArg(args []string, flag, value string) []string {
	out := slices.Clone(args)
	for i := range len(out) - 1 {
		if out[i] == flag {
			out[i+1] = value
		}
	}
	return out
}

// TestProcessTwoSpokesForOneCluster: a second spoke process for a cluster
// takes the stream over once, and the first, displaced, is refused from
// then on instead of taking it back in turn; the hub names both.
func TestProcessTwoSpokesForOneCluster(t *testing.T) {
	h := startProcHub(t, "--xds-warmup", "0s")
	pod := startBackend(t, "127.0.7.1", "east")
	startProcSpoke(t, h.federation, "east", "n1", echoManifests("z-east", pod))
	first := h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.version > 0 })
	startProcSpoke(t, h.federation, "east", "n1", echoManifests("z-east", pod))
	row := h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.duplicateRefusals >= 3 })
	if row.supersessions != 1 {
		t.Errorf("%d supersessions while the first spoke kept trying; want 1 (the second holds the stream)", row.supersessions)
	}
	if row.peer == first.peer || !strings.Contains(row.duplicate, row.peer+" holds it") {
		t.Errorf("duplicate condition %q, holder %s (first spoke %s); want the second spoke holding and both named", row.duplicate, row.peer, first.peer)
	}
	if line := h.metricLine(t, `meshfed_hub_spoke_refusals_total{reason="duplicate"}`); line == "" || strings.HasSuffix(line, " 0") {
		t.Errorf("duplicate refusals not counted: %q", line)
	}
}
