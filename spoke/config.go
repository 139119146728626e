package spoke

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/debughttp"
	"github.com/meshfed/meshfed/internal/memlimit"
	"github.com/meshfed/meshfed/spoke/leader"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/uplink"
)

// Config configures a spoke.
type Config struct {
	ClusterID   string
	Network     string
	TrustDomain string
	// Hub is the hub's federation address: host:port entries separated by
	// commas, each name standing for all of its addresses (a headless
	// Service's, one per replica). The spoke streams to every replica.
	Hub string
	// HubResolveInterval is how often the names in Hub are resolved again
	// to follow replicas that come and go (0: never after the first time).
	HubResolveInterval time.Duration
	// The source of the cluster's objects, exactly one: Manifests, a
	// directory of Kubernetes YAML (the file source); Kubeconfig, the
	// kubeconfig file of the cluster's API server (the kube source); or,
	// when neither is set and InCluster is, the API server of the pod the
	// spoke runs in.
	Manifests  string
	Kubeconfig string
	// KubeQPS and KubeBurst bound the spoke's requests to its API server
	// (0: 50 and 100). Watches are not counted; the ServiceExport status
	// writes are: 5,000 exports take 100 s to mark Valid at 50 per second.
	KubeQPS   float64
	KubeBurst int
	// ImportQPS and ImportBurst bound the writes of the clusterset's
	// imports into the cluster (ServiceImports and their EndpointSlices),
	// with a rate limiter of their own (0: 500 and twice the QPS): a
	// clusterset's first sync is thousands of writes, which must neither
	// take minutes nor hold back the ServiceExport status and the Events.
	ImportQPS   float64
	ImportBurst int
	// MCPAddr serves the cluster's own istiod the clusterset's services
	// over MCP-over-xDS ("": off); MCPInitialWait bounds how long its
	// ServiceEntries wait for a hub's first set.
	MCPAddr        string
	MCPInitialWait time.Duration
	// RemoteViewsAddr serves the cluster's istiod each other member as a
	// remote cluster: a read-only Kubernetes API of what that member
	// exports, at /clusters/<id>/ ("": off). RemoteViewsTokenFile holds
	// the bearer token istiod's kubeconfigs present ("": any client may
	// read, which only a loopback address should allow).
	// RemoteViewsCertFile and RemoteViewsKeyFile serve the views over
	// HTTPS, which a token needs: Kubernetes clients send none over HTTP.
	RemoteViewsAddr                                               string
	RemoteViewsTokenFile, RemoteViewsCertFile, RemoteViewsKeyFile string
	// RemoteViewsURL, when set, has the spoke write istiod a remote
	// secret per member (in RemoteViewsSecretNamespace) whose kubeconfig
	// reaches its view at this URL, trusting RemoteViewsCAFile.
	// RemoteViewsSecretPrefix starts their names; RemoteViewsSecretOwner
	// names a ConfigMap there that owns them.
	RemoteViewsURL, RemoteViewsCAFile, RemoteViewsSecretNamespace, RemoteViewsSecretPrefix, RemoteViewsSecretOwner string
	// InCluster says the spoke runs in a pod. DefaultConfig sets it when
	// KUBERNETES_SERVICE_HOST is set, as the kubelet does in every pod.
	InCluster bool
	// TLS: the spoke's certificate (carrying the cluster's SPIFFE ID) and
	// the CA that signs the hub's; ServerName overrides the name checked in
	// the hub's certificate (default: the host of the Hub entry).
	CertFile, KeyFile, CAFile, ServerName string
	// Insecure dials the hub in plaintext.
	Insecure bool
	// Export selects the exported services: "exported" (MCS ServiceExport or
	// the meshfed.io/export label) or "all".
	Export          string
	DomainSuffix    string
	SystemNamespace string
	// GatewayNamespaces are where east-west gateway Services are read
	// (empty: SystemNamespace only).
	GatewayNamespaces []string
	MaxMessageBytes   int
	KeepaliveTime     time.Duration
	// AckTimeout bounds how long an update to the hub may make no progress
	// before the spoke reopens the stream and resumes (0: one minute).
	AckTimeout time.Duration
	// DebugAddr serves /healthz and /debug/pprof/ ("" disables it).
	DebugAddr string
	// DebugCmdline serves /debug/pprof/cmdline, which shows the command
	// line and with it the paths of the spoke's key and kubeconfig.
	DebugCmdline bool
	// DebugHosts are further Host names a loopback debug listener accepts
	// (localhost and IP addresses always are; others are refused against
	// DNS rebinding).
	DebugHosts []string
	// Build is reported to the hub.
	Build string
	// MemoryLimitRatio × the container's memory limit becomes the Go soft
	// memory limit, unless GOMEMLIMIT is set (0: leave the runtime's limit
	// alone). [Command] applies it; New and Run do not read it.
	MemoryLimitRatio float64
	// GCPercent is the garbage collector's target unless GOGC is set (0:
	// Go's default, 100). [Command] applies it; New and Run do not read it.
	GCPercent int
	// LeaderElection, when enabled, lets several spokes run for the
	// cluster: only the holder of a Lease streams to the hub and writes
	// into the cluster. Its empty Namespace is the pod's, else
	// SystemNamespace.
	LeaderElection leader.Config
}

// DefaultGCPercent is the spoke's garbage collection target. A spoke runs
// in every cluster of a fleet and is idle between changes: half of Go's
// default headroom costs it CPU mostly during its initial sync, and saves
// a good part of its resident memory at scale (BENCHMARKS.md, "The spoke
// on a real API server at scale").
const DefaultGCPercent = 50

// DefaultConfig returns the defaults. It reads the environment once, to
// know whether the spoke runs in a pod.
func DefaultConfig() Config {
	return Config{
		InCluster:                  os.Getenv("KUBERNETES_SERVICE_HOST") != "",
		TrustDomain:                "cluster.local",
		Hub:                        "localhost:9443",
		HubResolveInterval:         5 * time.Second,
		Export:                     string(normalize.ExportExported),
		DomainSuffix:               "cluster.local",
		MCPInitialWait:             30 * time.Second,
		RemoteViewsSecretNamespace: "istio-system",
		RemoteViewsSecretPrefix:    "meshfed-remote-",
		SystemNamespace:            "istio-system",
		MaxMessageBytes:            4 << 20,
		KeepaliveTime:              30 * time.Second,
		AckTimeout:                 uplink.DefaultAckTimeout,
		MemoryLimitRatio:           memlimit.DefaultRatio,
		GCPercent:                  DefaultGCPercent,
		LeaderElection:             leader.DefaultConfig(),
	}
}

// AddFlags declares the spoke's flags, defaulting to c's values.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ClusterID, "cluster-id", c.ClusterID, "this cluster's ID (a DNS label, unique in the clusterset; must match the certificate). Default: the cluster's About API, ClusterProperty cluster.clusterset.k8s.io, which it must agree with when both are given")
	fs.StringVar(&c.Network, "network", c.Network, "this cluster's default network (the system namespace's topology.istio.io/network label overrides it)")
	fs.StringVar(&c.TrustDomain, "trust-domain", c.TrustDomain, "this cluster's trust domain")
	fs.StringVar(&c.Hub, "hub", c.Hub, "the hub's federation address, host:port; a comma-separated list, or a name with an address per replica (a headless Service): the spoke streams to every replica")
	fs.DurationVar(&c.HubResolveInterval, "hub-resolve-interval", c.HubResolveInterval, "resolve the --hub names again this often, to follow replicas that come and go (0: only at start)")
	fs.StringVar(&c.Manifests, "manifests", c.Manifests, "federate the Kubernetes YAML in this directory (watched for changes)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "federate the cluster of this kubeconfig file (its current context); in a pod, the default is the pod's cluster")
	fs.Float64Var(&c.KubeQPS, "kube-qps", c.KubeQPS, "requests per second to the API server, watches aside (0: 50); the ServiceExport status writes use it")
	fs.IntVar(&c.KubeBurst, "kube-burst", c.KubeBurst, "burst of requests to the API server (0: 100)")
	fs.Float64Var(&c.ImportQPS, "import-qps", c.ImportQPS, "writes per second of the clusterset's imports (ServiceImports, EndpointSlices) into the cluster, apart from --kube-qps (0: 500)")
	fs.IntVar(&c.ImportBurst, "import-burst", c.ImportBurst, "burst of the import writes (0: twice --import-qps)")
	fs.StringVar(&c.MCPAddr, "mcp-addr", c.MCPAddr, `serve the cluster's istiod the clusterset's services as ServiceEntries over MCP-over-xDS at this address (its meshConfig.configSources: xds://ADDR); "" disables it`)
	fs.StringVar(&c.RemoteViewsAddr, "remote-views-addr", c.RemoteViewsAddr, `serve the cluster's istiod each other member as a remote cluster (a read-only Kubernetes API of what it exports, at /clusters/<id>/) at this address, for Istio's ambient multicluster without remote secrets; "" disables it`)
	fs.StringVar(&c.RemoteViewsTokenFile, "remote-views-token-file", c.RemoteViewsTokenFile, "file holding the bearer token a client of --remote-views-addr must present (empty: any client, for a loopback address only)")
	fs.StringVar(&c.RemoteViewsURL, "remote-views-url", c.RemoteViewsURL, "write istiod a remote secret per member whose kubeconfig reaches its view at this URL (https://HOST:PORT, the address of --remote-views-addr as istiod dials it); empty: write none")
	fs.StringVar(&c.RemoteViewsCAFile, "remote-views-ca-file", c.RemoteViewsCAFile, "the CA (PEM) that signs --remote-views-tls-cert, for the remote secrets' kubeconfigs")
	fs.StringVar(&c.RemoteViewsSecretNamespace, "remote-views-secret-namespace", c.RemoteViewsSecretNamespace, "istiod's namespace, where the remote secrets go")
	fs.StringVar(&c.RemoteViewsSecretPrefix, "remote-views-secret-prefix", c.RemoteViewsSecretPrefix, `start of the remote secrets' names, which end with the member's ID; "istio-remote-secret-" (istioctl's) takes Istio's remote secrets over in place, which istiod swaps make-before-break`)
	fs.StringVar(&c.RemoteViewsSecretOwner, "remote-views-secret-owner", c.RemoteViewsSecretOwner, "a ConfigMap in --remote-views-secret-namespace that owns the remote secrets: deleting it deletes them (the spoke chart's uninstall); while it is missing, none is written. Empty: no owner")
	fs.StringVar(&c.RemoteViewsCertFile, "remote-views-tls-cert", c.RemoteViewsCertFile, "serve --remote-views-addr over HTTPS with this certificate (PEM); a token needs it")
	fs.StringVar(&c.RemoteViewsKeyFile, "remote-views-tls-key", c.RemoteViewsKeyFile, "the key of --remote-views-tls-cert (PEM)")
	fs.DurationVar(&c.MCPInitialWait, "mcp-initial-wait", c.MCPInitialWait, "how long istiod's ServiceEntries wait for a hub's first set of services before they are answered empty, so that a starting istiod is not held up by an unreachable hub")
	fs.StringVar(&c.CertFile, "tls-cert", c.CertFile, "the spoke's TLS certificate (PEM, URI SAN spiffe://<td>/meshfed/cluster/<id>)")
	fs.StringVar(&c.KeyFile, "tls-key", c.KeyFile, "the spoke's TLS key (PEM)")
	fs.StringVar(&c.CAFile, "tls-ca", c.CAFile, "the CA that signs the hub's certificate (PEM)")
	fs.StringVar(&c.ServerName, "tls-server-name", c.ServerName, "name to verify in the hub's certificate (default: the host of --hub)")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "dial the hub in plaintext (local testing only)")
	fs.StringVar(&c.Export, "export", c.Export, `which services to federate: "exported" (MCS ServiceExport or label meshfed.io/export=true) or "all"`)
	fs.StringVar(&c.DomainSuffix, "domain-suffix", c.DomainSuffix, "the cluster's DNS domain")
	fs.StringVar(&c.SystemNamespace, "system-namespace", c.SystemNamespace, "namespace whose topology.istio.io/network label sets the cluster's network")
	fs.Var((*namespaceList)(&c.GatewayNamespaces), "gateway-namespaces", "comma-separated namespaces whose Services may declare east-west gateways (default: --system-namespace); a gateway draws another network's traffic, so keep this to namespaces the platform team owns")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest federation message sent (the hub may ask for less)")
	fs.DurationVar(&c.KeepaliveTime, "keepalive-time", c.KeepaliveTime, "ping the hub connection when idle for this long")
	fs.DurationVar(&c.AckTimeout, "ack-timeout", c.AckTimeout, "reopen the hub stream when an update makes no progress (a chunk sent, or the hub's answer) for this long")
	fs.StringVar(&c.DebugAddr, "debug-addr", c.DebugAddr, `address for /healthz and /debug/pprof/ (HTTP; keep it local; "" disables it)`)
	debughttp.AddFlags(fs, &c.DebugCmdline, &c.DebugHosts)
	fs.Float64Var(&c.MemoryLimitRatio, "memory-limit-ratio", c.MemoryLimitRatio, "share of the container's memory limit (cgroup) that becomes the Go soft memory limit, unless GOMEMLIMIT is set (0 turns this off)")
	fs.IntVar(&c.GCPercent, "gc-percent", c.GCPercent, "garbage collection target as GOGC, unless GOGC is set (0: Go's default, 100); lower trades CPU for memory")
	c.LeaderElection.AddFlags(fs)
}

// Validate reports the problems in c.
func (c Config) Validate() error {
	var errs []error
	if c.ClusterID == "" && c.Manifests != "" {
		// A Kubernetes source may read it from the cluster's About API.
		errs = append(errs, errors.New("--cluster-id is required with --manifests"))
	}
	if c.Hub == "" {
		errs = append(errs, errors.New("--hub is required"))
	} else if _, err := parseHubs(c.Hub); err != nil {
		errs = append(errs, err)
	}
	if c.HubResolveInterval < 0 {
		errs = append(errs, fmt.Errorf("--hub-resolve-interval %v is negative", c.HubResolveInterval))
	}
	switch {
	case c.Manifests != "" && c.Kubeconfig != "":
		errs = append(errs, errors.New("--manifests and --kubeconfig are exclusive: give one source"))
	case c.Manifests == "" && c.Kubeconfig == "" && !c.InCluster:
		errs = append(errs, errors.New("a source is required: --kubeconfig PATH, --manifests DIR, or run in a pod (in-cluster config)"))
	}
	if !c.Insecure && (c.CertFile == "" || c.KeyFile == "" || c.CAFile == "") {
		errs = append(errs, errors.New("--tls-cert, --tls-key and --tls-ca are required (or --insecure for plaintext)"))
	}
	switch normalize.ExportPolicy(c.Export) {
	case normalize.ExportExported, normalize.ExportAll:
	default:
		errs = append(errs, fmt.Errorf(`--export %q: want "exported" or "all"`, c.Export))
	}
	if c.KubeQPS < 0 || c.KubeBurst < 0 {
		errs = append(errs, errors.New("--kube-qps and --kube-burst cannot be negative"))
	}
	if c.RemoteViewsURL != "" && (c.RemoteViewsAddr == "" || c.RemoteViewsTokenFile == "" || c.RemoteViewsCAFile == "" || c.RemoteViewsSecretNamespace == "" || !strings.HasPrefix(c.RemoteViewsURL, "https://")) {
		errs = append(errs, fmt.Errorf("--remote-views-url %q: the remote secrets need an https:// URL, --remote-views-addr, --remote-views-token-file, --remote-views-ca-file and --remote-views-secret-namespace", c.RemoteViewsURL))
	}
	if c.RemoteViewsURL != "" && c.Manifests != "" {
		errs = append(errs, errors.New("--remote-views-url writes Secrets into the cluster: it needs a Kubernetes source, not --manifests"))
	}
	if (c.RemoteViewsCertFile == "") != (c.RemoteViewsKeyFile == "") {
		errs = append(errs, errors.New("--remote-views-tls-cert and --remote-views-tls-key go together"))
	}
	if c.RemoteViewsTokenFile != "" && c.RemoteViewsCertFile == "" {
		errs = append(errs, errors.New("--remote-views-token-file needs --remote-views-tls-cert and --remote-views-tls-key: Kubernetes clients send no token over plain HTTP"))
	}
	if c.RemoteViewsAddr != "" && c.RemoteViewsTokenFile == "" && !cli.LoopbackAddr(c.RemoteViewsAddr) {
		errs = append(errs, fmt.Errorf("--remote-views-addr %q is not a loopback address: set --remote-views-token-file, or any client that reaches it reads every member's exports", c.RemoteViewsAddr))
	}
	if c.MCPInitialWait < 0 {
		errs = append(errs, fmt.Errorf("--mcp-initial-wait %v is negative", c.MCPInitialWait))
	}
	if c.ImportQPS < 0 || c.ImportBurst < 0 {
		errs = append(errs, errors.New("--import-qps and --import-burst cannot be negative"))
	}
	if !(c.MemoryLimitRatio >= 0 && c.MemoryLimitRatio < 1) {
		errs = append(errs, fmt.Errorf("--memory-limit-ratio %v is outside [0, 1) (0 turns it off)", c.MemoryLimitRatio))
	}
	if c.AckTimeout < 0 {
		errs = append(errs, fmt.Errorf("--ack-timeout %v is negative", c.AckTimeout))
	}
	if c.GCPercent < 0 {
		errs = append(errs, fmt.Errorf("--gc-percent %d is negative (0 keeps Go's default)", c.GCPercent))
	}
	if err := c.LeaderElection.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.LeaderElection.Enabled && c.Manifests != "" {
		errs = append(errs, errors.New("--leader-elect needs a Kubernetes source, which holds the Lease: not --manifests"))
	}
	return errors.Join(errs...)
}

func (c Config) normalizeOptions() normalize.Options {
	return normalize.Options{
		ClusterID:         c.ClusterID,
		Network:           c.Network,
		TrustDomain:       c.TrustDomain,
		DomainSuffix:      c.DomainSuffix,
		SystemNamespace:   c.SystemNamespace,
		GatewayNamespaces: c.GatewayNamespaces,
		Export:            normalize.ExportPolicy(c.Export),
	}.WithDefaults()
}

// source names the source c selects, for logs.
func (c Config) source() (kind, location string) {
	switch {
	case c.Manifests != "":
		return "manifests", c.Manifests
	case c.Kubeconfig != "":
		return "kubeconfig", c.Kubeconfig
	default:
		return "in-cluster", ""
	}
}

// namespaceList is a comma-separated flag of namespace names.
type namespaceList []string

func (l *namespaceList) String() string { return strings.Join(*l, ",") }

func (l *namespaceList) Set(v string) error {
	var out []string
	for ns := range strings.SplitSeq(v, ",") {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
		}
		out = append(out, ns)
	}
	*l = out
	return nil
}
