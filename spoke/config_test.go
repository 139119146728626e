package spoke

import (
	"flag"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/spoke/source/file"
	"github.com/meshfed/meshfed/spoke/source/kube"
)

func TestValidateSource(t *testing.T) {
	tests := []struct {
		name                  string
		manifests, kubeconfig string
		inCluster             bool
		wantErr               string
	}{
		{name: "manifests", manifests: "east"},
		{name: "kubeconfig", kubeconfig: "kubeconfig"},
		{name: "in a pod", inCluster: true},
		{name: "a flag wins over the pod", kubeconfig: "kubeconfig", inCluster: true},
		{name: "both", manifests: "east", kubeconfig: "kubeconfig", wantErr: "exclusive"},
		{name: "none", wantErr: "a source is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ClusterID, cfg.Insecure = "east", true
			cfg.Manifests, cfg.Kubeconfig, cfg.InCluster = tt.manifests, tt.kubeconfig, tt.inCluster
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestValidateMemoryLimitRatio(t *testing.T) {
	if got := DefaultConfig().MemoryLimitRatio; got != 0.9 {
		t.Errorf("default MemoryLimitRatio %v, want 0.9", got)
	}
	for ratio, wantErr := range map[float64]bool{0: false, 0.5: false, 0.99: false, 1: true, 1.5: true, -0.1: true, math.NaN(): true} {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Manifests, cfg.Insecure = "east", "east", true
		cfg.MemoryLimitRatio = ratio
		err := cfg.Validate()
		switch {
		case !wantErr && err != nil:
			t.Errorf("ratio %v: Validate() = %v", ratio, err)
		case wantErr && (err == nil || !strings.Contains(err.Error(), "--memory-limit-ratio")):
			t.Errorf("ratio %v: Validate() = %v, want an error naming --memory-limit-ratio", ratio, err)
		}
	}
}

// TestValidateRemoteViews: the views need a token off loopback, and a
// token needs HTTPS (Kubernetes clients send none over HTTP).
func TestValidateRemoteViews(t *testing.T) {
	for _, tc := range []struct {
		addr, token, cert, key string
		says                   string
	}{
		{addr: "127.0.0.1:15012"},
		{addr: "localhost:15012"},
		{addr: ":15012", token: "t", cert: "c", key: "k"},
		{addr: ":15012", says: "not a loopback address"},
		{addr: "10.0.0.1:15012", says: "not a loopback address"},
		{addr: ":15012", token: "t", says: "Kubernetes clients send no token over plain HTTP"},
		{addr: ":15012", token: "t", cert: "c", says: "go together"},
	} {
		cfg := DefaultConfig()
		cfg.ClusterID, cfg.Manifests, cfg.Insecure = "east", "east", true
		cfg.RemoteViewsAddr, cfg.RemoteViewsTokenFile, cfg.RemoteViewsCertFile, cfg.RemoteViewsKeyFile = tc.addr, tc.token, tc.cert, tc.key
		err := cfg.Validate()
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%+v: Validate() = %v", tc, err)
		case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%+v: Validate() = %v, want an error saying %q", tc, err, tc.says)
		}
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: east
  cluster:
    server: https://127.0.0.1:6443
contexts:
- name: east
  context: {cluster: east, user: spoke}
current-context: east
users:
- name: spoke
  user: {token: not-a-secret}
`

func TestNewSource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ClusterID = "east"

	cfg.Manifests = dir
	if src, wb, _, err := newSource(cfg, nil, nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("--manifests: %v", err)
	} else if _, ok := src.(*file.Source); !ok || wb != nil {
		t.Errorf("--manifests: source %T and write-back %v, want the file source and none", src, wb)
	}

	cfg.Manifests, cfg.Kubeconfig = "", path
	if src, wb, _, err := newSource(cfg, nil, nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("--kubeconfig: %v", err)
	} else if _, ok := src.(*kube.Source); !ok || wb == nil {
		t.Errorf("--kubeconfig: source %T and write-back %v, want the kube source and its write-back", src, wb)
	}

	// A QPS without a burst: client-go refuses a zero burst, the source derives one.
	cfg.KubeQPS = 500
	if _, _, _, err := newSource(cfg, nil, nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("--kube-qps 500: %v", err)
	}
	cfg.KubeQPS, cfg.KubeBurst = -1, 0
	cfg.Manifests, cfg.Insecure = "", true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--kube-qps") {
		t.Errorf("--kube-qps -1: Validate() = %v, want an error naming it", err)
	}
	cfg.KubeQPS = 0

	cfg.Kubeconfig = filepath.Join(dir, "missing")
	if _, _, _, err := newSource(cfg, nil, nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("missing kubeconfig: %v, want an error naming --kubeconfig", err)
	}
}

func TestGatewayNamespacesFlag(t *testing.T) {
	for _, tt := range []struct {
		arg     string
		want    []string
		wantErr bool
	}{
		{arg: "istio-system", want: []string{"istio-system"}},
		{arg: "istio-system, gateways", want: []string{"istio-system", "gateways"}},
		{arg: "Gateways", wantErr: true},
		{arg: "a,,b", wantErr: true},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("spoke", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.AddFlags(fs)
		err := fs.Parse([]string{"--gateway-namespaces", tt.arg})
		if (err != nil) != tt.wantErr {
			t.Errorf("--gateway-namespaces %q: %v, want an error: %v", tt.arg, err, tt.wantErr)
			continue
		}
		if err == nil && !slices.Equal(cfg.GatewayNamespaces, tt.want) {
			t.Errorf("--gateway-namespaces %q = %q, want %q", tt.arg, cfg.GatewayNamespaces, tt.want)
		}
		if err == nil && !slices.Equal(cfg.normalizeOptions().GatewayNamespaces, tt.want) {
			t.Errorf("--gateway-namespaces %q does not reach normalization", tt.arg)
		}
	}
	if got := DefaultConfig().normalizeOptions().GatewayNamespaces; !slices.Equal(got, []string{"istio-system"}) {
		t.Errorf("default gateway namespaces %q, want the system namespace", got)
	}
}
