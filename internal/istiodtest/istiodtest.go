package istiodtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testproc"
)

const (
	// BinaryName is the file istiod is built as, next to kube-apiserver
	// in the KUBEBUILDER_ASSETS folder.
	BinaryName = "pilot-discovery"
	// RequireEnv names the environment variable that turns a missing
	// binary from a skipped test into a failed one (CI sets it where it
	// builds istiod).
	RequireEnv = "MESHFED_REQUIRE_ISTIOD"
	// SystemNamespace is istiod's own namespace (POD_NAMESPACE): its CA
	// secret, leader-election leases and the network label live there.
	SystemNamespace = "istio-system"
	// NetworkLabel on the system namespace names the network of the
	// cluster's own endpoints.
	NetworkLabel = "topology.istio.io/network"
	// DefaultClusterID is istiod's cluster ID when Options.ClusterID is
	// empty (istiod's own default).
	DefaultClusterID = "Kubernetes"
)

const (
	// startTimeout bounds istiod's start: its informers' first lists and
	// every config source's first response, on a 2-core machine that
	// runs other packages' tests too.
	startTimeout = 120 * time.Second
	// shutdownDuration is istiod's --shutdownDuration: how long it lets
	// open xDS streams drain on SIGTERM (10 s by default). Tests close
	// their streams first, so this only bounds a leaked one.
	shutdownDuration = 2 * time.Second
	// stopTimeout bounds the wait for istiod to exit on SIGTERM, after
	// which it is killed.
	stopTimeout = 20 * time.Second
	// WaitTimeout bounds the waits of [ADSClient]: a change reaches a
	// proxy after a watch event or an MCP response and istiod's push
	// debounce (100 ms, at most 10 s), in well under a second unless the
	// machine is busy.
	WaitTimeout = 30 * time.Second
	// readyPollInterval is how often Start asks /ready, which logs a
	// warning every time it answers not ready.
	readyPollInterval = 50 * time.Millisecond
	// startAttempts is how many times Start picks new ports when another
	// process took the ones it picked before istiod bound them.
	startAttempts = 3
	// logTailLines is how much of istiod's log a failure shows.
	logTailLines = 30
)

// errPortTaken reports that istiod exited because a port it was given had
// been taken meanwhile.
var errPortTaken = errors.New("address already in use")

// Options is what a test chooses about istiod.
type Options struct {
	// ConfigSources are the addresses of the mesh config's configSources,
	// in order: "k8s://" (Istio config from the API server), or
	// "xds://HOST:PORT" (MCP over xDS, plaintext). A non-empty list
	// replaces the default, the API server alone, so list "k8s://" too to
	// keep it. istiod exits at start when an xds:// source is unreachable,
	// and is not ready until every type it subscribes to but MeshConfig
	// has had a response.
	ConfigSources []string
	// MeshNetworks is the YAML of istio's MeshNetworks ("networks: {net2:
	// {gateways: [{address: 10.2.0.100, port: 15443}]}}"), given with
	// --networksConfig. Empty: no networks.
	MeshNetworks string
	// ClusterID is istiod's cluster ID (CLUSTER_ID): the cluster its
	// Kubernetes endpoints and ServiceEntry endpoints are labelled with.
	// Empty: DefaultClusterID.
	ClusterID string
	// Network is written as the NetworkLabel of SystemNamespace (istiod
	// has no flag or variable for it): the network of the cluster's own
	// endpoints. Empty: the label is removed.
	Network string
	// Env adds environment variables (KEY=VALUE) after the ones Start
	// sets, so they override them: PILOT_DEBOUNCE_AFTER=10ms, say.
	Env []string
	// Mesh adds fields to the mesh config, as its YAML would hold them
	// ("serviceScopeConfigs": [...], say); configSources is
	// ConfigSources'.
	Mesh map[string]any
}

// Istiod is a running pilot-discovery.
type Istiod struct {
	// XDSAddr is the plaintext gRPC xDS address (istiod's port 15010):
	// 127.0.0.1:port.
	XDSAddr string
	// DebugAddr is the HTTP address of /ready and /debug/... (istiod's
	// port 8080): 127.0.0.1:port.
	DebugAddr string
	// MonitoringAddr is the HTTP address of /metrics (istiod's port
	// 15014): 127.0.0.1:port.
	MonitoringAddr string
	// ClusterID is the cluster ID istiod runs as.
	ClusterID string
	// Dir is istiod's working directory, which holds its mesh config,
	// mesh networks and log (LogPath).
	Dir     string
	LogPath string
	// ReadyAfter is how long istiod took from its start until it was
	// ready and its xDS port accepted connections.
	ReadyAfter time.Duration

	started time.Time
	proc    *testproc.Process
}

// Start runs istiod against cluster's API server as its administrator,
// with opts, waits until it is ready, and stops it in t.Cleanup. It skips
// the test when the binary is missing, as [RequireBinary] does, and fails
// it when istiod does not become ready within a deadline.
func Start(t testing.TB, cluster *kubetest.Cluster, opts Options) *Istiod {
	t.Helper()
	bin := RequireBinary(t)
	if opts.ClusterID == "" {
		opts.ClusterID = DefaultClusterID
	}
	if err := prepareCluster(t.Context(), cluster, opts.Network); err != nil {
		t.Fatalf("istiodtest: %s: %v", cluster.Name, err)
	}
	for attempt := 1; ; attempt++ {
		d := launch(t, bin, cluster.Kubeconfig, opts)
		ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
		err := d.waitReady(ctx)
		cancel()
		if err == nil {
			return d
		}
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			t.Fatalf("istiodtest: %v", err)
		}
	}
}

// RequireBinary returns the path of pilot-discovery, or skips the test
// when it is missing, saying how to get it; it fails the test instead when
// RequireEnv is set. A test calls it first to skip before it sets anything
// up.
func RequireBinary(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%v (%s is set)", err, RequireEnv)
		}
		t.Skip(err)
	}
	return bin
}

// Binary returns the path of the pilot-discovery that
// `make test-assets-istiod` builds into the KUBEBUILDER_ASSETS folder, or
// an error that says how to get it.
func Binary() (string, error) {
	dir, err := kubetest.AssetsDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, BinaryName)
	info, err := os.Stat(path)
	if err == nil && (info.IsDir() || info.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("istiodtest: %s=%s has no usable %s (%w): run the test with `make test-istiod`, "+
			"which builds istiod (minutes the first time)", kubetest.AssetsEnv, dir, BinaryName, err)
	}
	return path, nil
}

// prepareCluster creates istiod's namespace, where it writes its CA secret
// and leases, with network as its network label.
func prepareCluster(ctx context.Context, c *kubetest.Cluster, network string) error {
	namespaces := c.Client.CoreV1().Namespaces()
	ns, err := namespaces.Get(ctx, SystemNamespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}
		setNetworkLabel(ns, network)
		_, err = namespaces.Create(ctx, ns, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if ns.Labels[NetworkLabel] == network {
		return nil
	}
	setNetworkLabel(ns, network)
	_, err = namespaces.Update(ctx, ns, metav1.UpdateOptions{})
	return err
}

func setNetworkLabel(ns *corev1.Namespace, network string) {
	if network == "" {
		delete(ns.Labels, NetworkLabel)
		return
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[NetworkLabel] = network
}

type configSource struct {
	Address string `json:"address"`
}

// launch starts istiod on free ports without waiting for it, and stops it
// in t.Cleanup.
func launch(t testing.TB, bin, kubeconfig string, opts Options) *Istiod {
	t.Helper()
	var ports [3]int
	for i := range ports {
		port, err := freePort()
		if err != nil {
			t.Fatalf("istiodtest: %v", err)
		}
		ports[i] = port
	}
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	dir := t.TempDir()
	d := &Istiod{
		XDSAddr:        addr(ports[0]),
		DebugAddr:      addr(ports[1]),
		MonitoringAddr: addr(ports[2]),
		ClusterID:      opts.ClusterID,
		Dir:            dir,
		LogPath:        filepath.Join(dir, "istiod.log"),
	}

	mesh := maps.Clone(opts.Mesh)
	if mesh == nil {
		mesh = map[string]any{}
	}
	if len(opts.ConfigSources) > 0 {
		var sources []configSource
		for _, a := range opts.ConfigSources {
			sources = append(sources, configSource{Address: a})
		}
		mesh["configSources"] = sources
	}
	meshYAML, err := yaml.Marshal(mesh)
	if err != nil {
		t.Fatalf("istiodtest: mesh config: %v", err)
	}
	networks := opts.MeshNetworks
	if strings.TrimSpace(networks) == "" {
		networks = "networks: {}\n"
	}
	meshFile, networksFile := filepath.Join(dir, "mesh.yaml"), filepath.Join(dir, "meshNetworks.yaml")
	for file, data := range map[string][]byte{meshFile: meshYAML, networksFile: []byte(networks)} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatalf("istiodtest: %v", err)
		}
	}

	cmd := exec.Command(bin, "discovery",
		"--kubeconfig", kubeconfig,
		"--meshConfig", meshFile,
		"--networksConfig", networksFile,
		"--clusterID", opts.ClusterID,
		"--grpcAddr", d.XDSAddr,
		"--httpAddr", d.DebugAddr,
		"--monitoringAddr", d.MonitoringAddr,
		// Ports no test talks to: the kernel picks them, so they never
		// collide with another process's.
		"--secureGRPCAddr", "127.0.0.1:0",
		"--httpsAddr", "127.0.0.1:0",
		"--ctrlz_address", "127.0.0.1",
		"--ctrlz_port", "0",
		"--shutdownDuration", shutdownDuration.String(),
	)
	// Relative defaults (./etc/cacerts, ./var/lib/istio/inject, ...)
	// resolve inside the test's directory, where there is nothing.
	cmd.Dir = dir
	cmd.Env = append(environ(),
		"POD_NAMESPACE="+SystemNamespace,
		"POD_NAME=istiod-"+filepath.Base(dir),
		"CLUSTER_ID="+opts.ClusterID,
	)
	cmd.Env = append(cmd.Env, opts.Env...)
	d.started = time.Now()
	d.proc = testproc.Start(t, "istiod", cmd, d.LogPath, stopTimeout)
	// Registered after the process's, so it runs before istiod is
	// stopped; a failed start's message has the tail already.
	t.Cleanup(func() {
		if t.Failed() && d.ReadyAfter > 0 {
			t.Logf("istiodtest: %s", d.logTail())
		}
	})
	return d
}

// environ is the test's environment without what would make istiod look
// for a cluster other than the one it is given.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		switch key {
		case "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE", "POD_NAME", "CLUSTER_ID", "REVISION":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePort returns a loopback TCP port that is free at the moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// Pid is istiod's process ID (for its /proc entries: RSS, CPU time).
func (d *Istiod) Pid() int { return d.proc.Pid }

// waitReady polls /ready until it answers 200, then the xDS port until it
// accepts a connection: istiod opens it just after it turns ready.
func (d *Istiod) waitReady(ctx context.Context) error {
	// No keep-alive: no connection (and goroutine) outlives the wait.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	ticker := time.NewTicker(readyPollInterval)
	defer ticker.Stop()
	ready := false
	var last error
	for {
		if !ready {
			ready, last = testproc.HTTPReady(ctx, client, "http://"+d.DebugAddr+"/ready")
		}
		if ready {
			var conn net.Conn
			if conn, last = (&net.Dialer{}).DialContext(ctx, "tcp", d.XDSAddr); last == nil {
				_ = conn.Close()
				d.ReadyAfter = time.Since(d.started)
				return nil
			}
		}
		select {
		case <-d.proc.Done():
			err := fmt.Errorf("istiod exited: %w%s", d.proc.Err(), d.logTail())
			if d.proc.LogContains(errPortTaken.Error()) {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("istiod not ready: %w (last: %w)%s", ctx.Err(), last, d.logTail())
		case <-ticker.C:
		}
	}
}

// logTail returns the end of istiod's log, to explain a failure.
func (d *Istiod) logTail() string {
	return d.proc.LogTail(logTailLines)
}
