package charts_test

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/internal/kubetest"
)

// guidePath is the operator guide whose commands TestOperatorGuide runs.
const guidePath = "../docs/operating.md"

// guideValues replaces the guide's placeholders, as a user would.
var guideValues = strings.NewReplacer(
	"<your-registry>", "example",
	"<a name of every hub replica>", "meshfed-hub-sync.meshfed.svc",
)

// TestOperatorGuide runs the operator guide's commands as written, with
// the real kubectl and helm, against two real API servers (the hub's
// cluster and a member's): certificates, the hub's install with its
// values file, a spoke's install, and the uninstall with the clean-up of
// the imports a spoke leaves behind. Pods do not run (no kubelet): what
// it proves is that each command works and leaves what the guide says.
func TestOperatorGuide(t *testing.T) {
	assets, err := kubetest.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("the guide's commands need kubectl: %v (run `make test-assets`)", err)
	}
	guide := readGuide(t)
	clusters := kubetest.Start(t, 2)
	hubCluster, east := clusters[0], clusters[1]

	// The commands find kubectl, helm and meshfed on the PATH, and the
	// charts where the guide has them: ./charts, from a checkout.
	h := newHelm(t)
	bin := t.TempDir()
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", filepath.Join(bin, "meshfed"), "github.com/meshfed/meshfed/cmd/meshfed").CombinedOutput(); err != nil {
		t.Fatalf("go build meshfed: %v\n%s", err, out)
	}
	for _, link := range []struct{ name, target string }{{"kubectl", kubectl}, {"helm", h.path}} {
		if err := os.Symlink(link.target, filepath.Join(bin, link.name)); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	if err := os.Symlink(h.dir, filepath.Join(work, "charts")); err != nil {
		t.Fatal(err)
	}
	shell := func(t *testing.T, c *kubetest.Cluster, script string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = work
		cmd.Env = append(slices.Clone(h.env), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("the guide's commands failed: %v\n%s\n---\n%s", err, script, out.String())
		}
		t.Logf("%s\n---\n%s", script, out.String())
	}

	// Before you start: the certificates, and (the user's own) the mesh
	// CA and the hub's xDS serving pair signed by it.
	certs := guide.inline(t, "Before you start", "meshfed certs ")
	shell(t, hubCluster, certs)
	shell(t, hubCluster, "cp certs/hub.crt xds.crt && cp certs/hub.key xds.key && cp certs/ca.crt mesh-ca.crt")

	t.Run("install the hub", func(t *testing.T) {
		values := guide.block(t, "Install the hub", "yaml")
		if name := strings.TrimPrefix(strings.SplitN(values, "\n", 2)[0], "# "); name != "hub-values.yaml" {
			t.Fatalf("the hub's values block is named %q", name)
		}
		if err := os.WriteFile(filepath.Join(work, "hub-values.yaml"), []byte(values), 0o600); err != nil {
			t.Fatal(err)
		}
		shell(t, hubCluster, guideValues.Replace(guide.block(t, "Install the hub", "sh")))

		d, err := hubCluster.Client.AppsV1().Deployments("meshfed").Get(t.Context(), "meshfed-hub", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, "example/meshfed/meshfed-hub:") {
			t.Errorf("the hub runs %s", img)
		}
		if ptr.Deref(d.Spec.Replicas, 0) != 2 {
			t.Errorf("the hub runs %d replicas, the guide says two", ptr.Deref(d.Spec.Replicas, 0))
		}
		for _, name := range []string{"meshfed-hub-xds", "meshfed-hub-sync", "meshfed-hub"} {
			if _, err := hubCluster.Client.CoreV1().Services("meshfed").Get(t.Context(), name, metav1.GetOptions{}); err != nil {
				t.Errorf("the guide's Service %s: %v", name, err)
			}
		}
		if _, err := hubCluster.Client.PolicyV1().PodDisruptionBudgets("meshfed").Get(t.Context(), "meshfed-hub", metav1.GetOptions{}); err != nil {
			t.Errorf("the guide's PodDisruptionBudget: %v", err)
		}
		policy, err := hubCluster.Client.CoreV1().ConfigMaps("meshfed").Get(t.Context(), "meshfed-hub-clusters", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if data := strings.Join(slices.Collect(maps.Values(policy.Data)), "\n"); !strings.Contains(data, "network-west") {
			t.Errorf("the values' clusterPolicy is not the hub's: %s", data)
		}
	})

	t.Run("install a spoke", func(t *testing.T) {
		shell(t, east, guideValues.Replace(guide.block(t, "Install a spoke in each cluster", "sh")))
		d, err := east.Client.AppsV1().Deployments("meshfed").Get(t.Context(), "meshfed-spoke", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if !strings.HasPrefix(c.Image, "example/meshfed/meshfed-spoke:") {
			t.Errorf("the spoke runs %s", c.Image)
		}
		args := strings.Join(c.Args, " ")
		for _, want := range []string{"--cluster-id=east", "--network=network-east", "meshfed-hub-sync.meshfed.svc:9443"} {
			if !strings.Contains(args, want) {
				t.Errorf("the spoke's args %q lack %s", args, want)
			}
		}
	})

	t.Run("uninstall", func(t *testing.T) {
		// What a spoke leaves behind (written here: no pod runs), and a
		// user's ServiceImport the clean-up must not touch.
		ctx := t.Context()
		if _, err := east.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, si := range []*mcsv1beta1.ServiceImport{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", Labels: map[string]string{"app.kubernetes.io/managed-by": "meshfed-spoke"}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "users"}},
		} {
			si.Spec = mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"240.242.0.9"}, Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}
			if _, err := east.MCS.MulticlusterV1beta1().ServiceImports("demo").Create(ctx, si, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo-west-ipv4-0", Labels: map[string]string{
				"endpointslice.kubernetes.io/managed-by": "spoke.meshfed.io", mcsv1beta1.LabelServiceName: "echo",
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.2.0.1"}}},
		}
		if _, err := east.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		shell(t, east, "helm uninstall meshfed-spoke -n meshfed")
		if _, err := east.Client.AppsV1().Deployments("meshfed").Get(ctx, "meshfed-spoke", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the spoke's Deployment after helm uninstall: %v", err)
		}
		if _, err := east.Client.CoreV1().Secrets("meshfed").Get(ctx, "meshfed-spoke-tls", metav1.GetOptions{}); err != nil {
			t.Errorf("the TLS Secret the guide says is left behind: %v", err)
		}
		shell(t, east, guide.block(t, "Uninstall", "sh"))
		if _, err := east.MCS.MulticlusterV1beta1().ServiceImports("demo").Get(ctx, "echo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("meshfed's ServiceImport after the clean-up: %v", err)
		}
		if _, err := east.Client.DiscoveryV1().EndpointSlices("demo").Get(ctx, slice.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("meshfed's EndpointSlice after the clean-up: %v", err)
		}
		if _, err := east.MCS.MulticlusterV1beta1().ServiceImports("demo").Get(ctx, "users", metav1.GetOptions{}); err != nil {
			t.Errorf("the user's ServiceImport after the clean-up: %v", err)
		}
	})
}

// guide is the operator guide's fenced blocks, by the heading they are
// under, and its text by heading.
type guide struct {
	blocks map[string][]fenced
	text   map[string]string
}

type fenced struct{ lang, body string }

func readGuide(t *testing.T) guide {
	t.Helper()
	f, err := os.Open(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only
	g := guide{blocks: map[string][]fenced{}, text: map[string]string{}}
	var heading string
	var block *fenced
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case block == nil && strings.HasPrefix(line, "```"):
			block = &fenced{lang: strings.TrimPrefix(line, "```")}
		case block != nil && line == "```":
			g.blocks[heading] = append(g.blocks[heading], *block)
			block = nil
		case block != nil:
			block.body += line + "\n"
		case strings.HasPrefix(line, "## "):
			heading = strings.TrimPrefix(line, "## ")
		default:
			g.text[heading] += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return g
}

// block is the first block of lang under a level-two heading.
func (g guide) block(t *testing.T, heading, lang string) string {
	t.Helper()
	for _, b := range g.blocks[heading] {
		if b.lang == lang {
			return b.body
		}
	}
	t.Fatalf("%s: no %s block under %q", guidePath, lang, heading)
	return ""
}

// inline is the first `code` span under a heading that starts with
// prefix.
func (g guide) inline(t *testing.T, heading, prefix string) string {
	t.Helper()
	text := strings.Join(strings.Fields(g.text[heading]), " ")
	for i, span := range strings.Split(text, "`") {
		if i%2 == 1 && strings.HasPrefix(span, prefix) {
			return span
		}
	}
	t.Fatalf("%s: no `%s...` under %q", guidePath, prefix, heading)
	return ""
}
