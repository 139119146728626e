package spoke

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/spoke/leader"
)

func TestLeaderElectionFlags(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.LeaderElection.Enabled {
		t.Error("leader election is on by default")
	}
	fs := flag.NewFlagSet("spoke", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.AddFlags(fs)
	err := fs.Parse([]string{
		"--leader-elect", "--leader-elect-lease-name=east-spoke", "--leader-elect-namespace=meshfed",
		"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := leader.Config{
		Enabled: true, LeaseName: "east-spoke", Namespace: "meshfed",
		LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 4 * time.Second,
	}
	if cfg.LeaderElection != want {
		t.Errorf("leader election %+v, want %+v", cfg.LeaderElection, want)
	}

	cfg.ClusterID, cfg.Insecure, cfg.Manifests = "east", true, t.TempDir()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--leader-elect needs a Kubernetes source") {
		t.Errorf("--leader-elect with --manifests: Validate() = %v", err)
	}
	cfg.Manifests, cfg.Kubeconfig = "", "kubeconfig"
	cfg.LeaderElection.RenewDeadline = time.Minute
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--leader-elect-lease-duration") {
		t.Errorf("a renew deadline past the lease: Validate() = %v", err)
	}
}

func TestNewElection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Kubeconfig = "east", path
	if el, err := newElection(cfg, nil); el != nil || err != nil {
		t.Fatalf("newElection without --leader-elect = %v, %v; want none", el, err)
	}
	if got := testutil.ToFloat64(leaderGauge(nil)); got != 1 {
		t.Errorf("meshfed_spoke_leader %v without an election, want 1: the spoke leads alone", got)
	}

	cfg.LeaderElection.Enabled = true
	t.Setenv("POD_NAMESPACE", "spokes")
	el, err := newElection(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := el.Lease(); got != "spokes/meshfed-spoke" {
		t.Errorf("lease %s, want the pod's namespace's meshfed-spoke", got)
	}
	if got := testutil.ToFloat64(leaderGauge(el)); got != 0 {
		t.Errorf("meshfed_spoke_leader %v before the spoke leads, want 0", got)
	}
	if len(el.holdWrites()) != 1 || len((*election)(nil).holdWrites()) != 0 {
		t.Error("a standby's writes are not held, or a lone spoke's are")
	}

	cfg.LeaderElection.Namespace = "meshfed"
	if el, err = newElection(cfg, nil); err != nil || el.Lease() != "meshfed/meshfed-spoke" {
		t.Errorf("--leader-elect-namespace meshfed: lease %v, %v", el, err)
	}

	t.Setenv("POD_NAMESPACE", "")
	cfg.LeaderElection.Namespace = ""
	if _, inPod := leader.PodNamespace(); !inPod {
		if el, err = newElection(cfg, nil); err != nil || el.Lease() != "istio-system/meshfed-spoke" {
			t.Errorf("outside a pod: lease %v, %v; want --system-namespace's", el, err)
		}
	}
}
