package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// AssetsEnv names the environment variable that holds the folder with the
// kube-apiserver and etcd binaries (controller-runtime's envtest reads it).
const AssetsEnv = "KUBEBUILDER_ASSETS"

// processTimeout bounds each process's start and stop: envtest's default,
// 20 s, is short for an API server on a 2-core machine that is also
// compiling and running other packages' tests.
const processTimeout = 90 * time.Second

// Cluster is one simulated cluster: a kube-apiserver with its own etcd.
type Cluster struct {
	// Name is "cluster-0", "cluster-1", ... in the order Start returned them.
	Name string
	// Config authenticates as an administrator (group system:masters).
	Config *rest.Config
	// Client, MCS and CRClient use Config. CRClient's scheme has client-go's
	// types and MCS v1alpha1 and v1beta1.
	Client   kubernetes.Interface
	MCS      mcsclientset.Interface
	CRClient client.Client
	// Kubeconfig is the path of a kubeconfig file for Config (for
	// `meshfed spoke --kubeconfig`), in the test's temporary directory.
	Kubeconfig string

	env  *envtest.Environment
	dir  string
	logs []*os.File // the processes' stderr, closed after they stop
}

// Start starts n independent API servers, in parallel, with the MCS CRDs
// installed, and stops them in t.Cleanup. It fails the test when the
// binaries are missing (see [AssetsDir]) or a server does not start.
func Start(t testing.TB, n int) []*Cluster {
	t.Helper()
	assets, err := AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range clusters {
		c := &Cluster{Name: fmt.Sprintf("cluster-%d", i), dir: t.TempDir()}
		clusters[i] = c
		wg.Go(func() {
			if err := c.start(assets); err != nil {
				errs[i] = fmt.Errorf("kubetest: %s: %w", c.Name, err)
			}
		})
	}
	wg.Wait()
	for _, c := range clusters {
		t.Cleanup(func() {
			if c.env != nil {
				if err := c.env.Stop(); err != nil {
					t.Errorf("kubetest: %s: stop: %v", c.Name, err)
				}
			}
			for _, f := range c.logs {
				_ = f.Close()
			}
		})
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return clusters
}

// AssetsDir returns the folder named by KUBEBUILDER_ASSETS after checking
// that it holds kube-apiserver and etcd, or an error that says how to get
// them.
func AssetsDir() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		built := "<repo>/.cache/testassets/<versions>"
		if found := builtAssets(); found != "" {
			built = found
		}
		return "", fmt.Errorf("kubetest: %s is not set: this test needs a real kube-apiserver and etcd; "+
			"run it with `make test` or `make test-e2e`, which build them (`make test-assets`) and set %s, "+
			"or after `make test-assets`: export %s=%s", AssetsEnv, AssetsEnv, AssetsEnv, built)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		path := filepath.Join(dir, bin)
		info, err := os.Stat(path)
		if err == nil && (info.IsDir() || info.Mode()&0o111 == 0) {
			err = errors.New("not an executable file")
		}
		if err != nil {
			return "", fmt.Errorf("kubetest: %s=%s has no usable %s (%w): run `make test-assets`", AssetsEnv, dir, bin, err)
		}
	}
	return dir, nil
}

// builtAssets returns the folder `make test-assets` built, when exactly one
// is found above the working directory (go test runs in the package's).
func builtAssets() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		found, _ := filepath.Glob(filepath.Join(dir, ".cache", "testassets", "*", "kube-apiserver"))
		if len(found) == 1 {
			return filepath.Dir(found[0])
		}
		parent := filepath.Dir(dir)
		if len(found) > 1 || parent == dir {
			return ""
		}
		dir = parent
	}
}

func (c *Cluster) start(assets string) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	// A CertDir of our own, unlike envtest's default, survives StopAPIServer,
	// so a restarted server keeps its serving certificate and client CA.
	certDir := filepath.Join(c.dir, "apiserver")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		return err
	}
	apiServer := &envtest.APIServer{CertDir: certDir}
	// On SIGTERM, kube-apiserver waits for open watches (every informer has
	// one) until its request timeout, 60 s, before it exits. In this mode it
	// drains the other requests, answers new ones with 429 Retry-After (as
	// an API server behind a load balancer does) and cuts watches after 2 s.
	apiServer.Configure().Set("shutdown-send-retry-after", "true")
	// Dual-stack Services (ipFamilyPolicy RequireDualStack), as the MCS
	// tests need; single-stack ones get IPv4 as before.
	apiServer.Configure().Set("service-cluster-ip-range", "10.0.0.0/24,fd00:10:96::/108")
	etcd := &envtest.Etcd{}
	if os.Getenv("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT") != "true" {
		for _, p := range []struct {
			name string
			w    *io.Writer
		}{{"kube-apiserver.log", &apiServer.Err}, {"etcd.log", &etcd.Err}} {
			f, err := os.Create(filepath.Join(c.dir, p.name))
			if err != nil {
				return err
			}
			c.logs = append(c.logs, f)
			*p.w = f
		}
	}
	c.env = &envtest.Environment{
		ControlPlane:          envtest.ControlPlane{APIServer: apiServer, Etcd: etcd},
		BinaryAssetsDirectory: assets,
		CRDs:                  crds,
	}
	// Zero leaves it to envtest, which reads its environment variable.
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		c.env.ControlPlaneStartTimeout = processTimeout
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT") == "" {
		c.env.ControlPlaneStopTimeout = processTimeout
	}
	cfg, err := c.env.Start()
	if err != nil {
		return fmt.Errorf("start: %w%s", err, c.logTail())
	}
	c.Config = cfg
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, c.env.KubeConfig, 0o600); err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if c.MCS, err = mcsclientset.NewForConfig(cfg); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, mcsv1alpha1.Install, mcsv1beta1.Install} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	c.CRClient, err = client.New(cfg, client.Options{Scheme: scheme})
	return err
}

// InstallGatewayAPI installs the Gateway API's GatewayClass and Gateway
// CRDs ([GatewayCRDs]) and waits until they are served.
func (c *Cluster) InstallGatewayAPI(t testing.TB) {
	t.Helper()
	c.installCRDs(t, "Gateway API", GatewayCRDs)
}

// InstallAuthorizationPolicies installs Istio's AuthorizationPolicy CRD
// ([AuthorizationPolicyCRD]) and waits until it is served.
func (c *Cluster) InstallAuthorizationPolicies(t testing.TB) {
	t.Helper()
	c.installCRDs(t, "AuthorizationPolicy", AuthorizationPolicyCRD)
}

// InstallAboutAPI installs the About API's ClusterProperty CRD
// ([ClusterPropertyCRD]) with the versions served that versions names
// (none: all), and waits until it is served.
func (c *Cluster) InstallAboutAPI(t testing.TB, versions ...string) {
	t.Helper()
	c.installCRDs(t, "About API", func() ([]*apiextensionsv1.CustomResourceDefinition, error) {
		crds, err := ClusterPropertyCRD()
		if err != nil || len(versions) == 0 {
			return crds, err
		}
		for _, crd := range crds {
			for i := range crd.Spec.Versions {
				v := &crd.Spec.Versions[i]
				v.Served = slices.Contains(versions, v.Name)
				v.Storage = v.Name == versions[0]
			}
			crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return !v.Served })
		}
		return crds, nil
	})
}

// InstallDestinationRules installs Istio's DestinationRule CRD
// ([DestinationRuleCRD]) and waits until it is served.
func (c *Cluster) InstallDestinationRules(t testing.TB) {
	t.Helper()
	c.installCRDs(t, "DestinationRule", DestinationRuleCRD)
}

func (c *Cluster) installCRDs(t testing.TB, what string, read func() ([]*apiextensionsv1.CustomResourceDefinition, error)) {
	t.Helper()
	crds, err := read()
	if err == nil {
		_, err = envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{CRDs: crds})
	}
	if err != nil {
		t.Fatalf("kubetest: %s: %s CRDs: %v", c.Name, what, err)
	}
}

// Restart stops the cluster's kube-apiserver and starts it again on the same
// address, with the same certificates, on the same etcd (so every object and
// resourceVersion is kept). Clients see their connections drop and watches
// end, as when a real API server restarts. Call it from the test's goroutine.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.StopAPIServer(t)
	c.StartAPIServer(t)
}

// StopAPIServer stops the cluster's kube-apiserver and leaves etcd running:
// requests fail with "connection refused" until StartAPIServer.
func (c *Cluster) StopAPIServer(t testing.TB) {
	t.Helper()
	if err := c.env.ControlPlane.APIServer.Stop(); err != nil {
		t.Fatalf("kubetest: %s: stop kube-apiserver: %v", c.Name, err)
	}
}

// StartAPIServer starts the kube-apiserver that StopAPIServer stopped, on the
// same address, and returns once it is healthy. It fails the test if the
// address has been taken meanwhile.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	if err := c.env.ControlPlane.APIServer.Start(); err != nil {
		t.Fatalf("kubetest: %s: start kube-apiserver again on %s: %v%s", c.Name, c.Config.Host, err, c.logTail())
	}
}

// logTail returns the end of the API server's log, to explain a failed start.
func (c *Cluster) logTail() string {
	data, err := os.ReadFile(filepath.Join(c.dir, "kube-apiserver.log"))
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	lines = lines[max(0, len(lines)-20):]
	return "\nlast lines of kube-apiserver's log:\n" + string(bytes.Join(lines, []byte("\n")))
}

// Main runs the tests of a package that starts API servers, for its
// TestMain: envtest logs through controller-runtime's logger, which Main
// sets to discard (without one, envtest prints a notice with a stack trace
// once the binary is 30 s old), and goleak fails the tests when one leaves
// a goroutine behind (but klog's flush daemon, started when klog is
// imported, and those opts ignore).
func Main(m *testing.M, opts ...goleak.Option) {
	ctrllog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m, append(opts, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))...)
}
