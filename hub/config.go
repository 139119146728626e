package hub

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/meshfed/meshfed/hub/clustersetip"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/debughttp"
	"github.com/meshfed/meshfed/internal/memlimit"
)

// Config configures a hub.
type Config struct {
	// FederationAddr is where spokes connect.
	FederationAddr string
	// XDSAddr is where proxies connect for ADS ("" disables xDS).
	XDSAddr string
	// XDSPushInterval coalesces registry changes that come faster than it.
	XDSPushInterval time.Duration
	// XDSWarmUp bounds how long a starting hub holds proxies while spokes
	// connect (0: serve at once); it serves sooner once every connected
	// spoke has sent its shard and none has joined for XDSWarmUpQuiet.
	XDSWarmUp, XDSWarmUpQuiet time.Duration
	// XDSMaxMessageBytes bounds xDS messages. A ztunnel's first response
	// holds every address of its network (about 355 bytes each), and
	// ztunnel itself accepts up to 200 MiB.
	XDSMaxMessageBytes int
	// XDSWorkloadAPI serves Istio ambient's workload API to ztunnels.
	// Off by default: the hub has the clusterset's exported services but
	// not a ztunnel's own cluster (its unexported workloads, waypoints,
	// AuthorizationPolicies); ztunnels belong on their cluster's istiod.
	XDSWorkloadAPI bool
	// XDS TLS: a key pair secures the xDS port; a CA also requires client certificates.
	XDSCertFile, XDSKeyFile, XDSCAFile string
	// XDSPlaintext accepts plaintext xDS on an address beyond loopback
	// (Insecure does too).
	XDSPlaintext bool
	// XDSStreamRate and XDSStreamBurst bound the new xDS streams one
	// source IP may open (0: the xDS server's defaults; a negative rate:
	// no limit). Loopback is exempt.
	XDSStreamRate  float64
	XDSStreamBurst int
	// DebugAddr serves /debug/*, /healthz, /readyz and /metrics. It is
	// local-only by default: the debug views show the whole clusterset.
	DebugAddr string
	// DebugCmdline serves /debug/pprof/cmdline, which shows the command
	// line and with it the paths of the hub's keys.
	DebugCmdline bool
	// DebugHosts are further Host names a loopback debug listener accepts
	// (localhost and IP addresses always are; others are refused against
	// DNS rebinding).
	DebugHosts []string
	// ClustersConfig is the cluster policy file ("": no policy, any
	// certificate of the CA may join and publish anything valid).
	ClustersConfig string
	// ClustersConfigInterval is how often the policy file is read for
	// changes.
	ClustersConfigInterval time.Duration
	// TLS: the hub's certificate and the CA that signs spoke certificates.
	CertFile, KeyFile, CAFile string
	// Insecure serves plaintext and trusts each spoke's claimed cluster.
	Insecure bool
	// TrustDomain of the spoke identities spiffe://<td>/meshfed/cluster/<id>.
	TrustDomain string
	// Clusterset names the clusterset the hub serves: a spoke whose
	// cluster's About API names another (ClusterProperty clusterset.k8s.io)
	// is refused. Empty: no spoke is refused for its clusterset.
	Clusterset string
	// MaxMessageBytes bounds every federation message in both directions.
	MaxMessageBytes int
	// Limits caps each cluster's shard.
	Limits registry.Limits
	// Leases say how long a cluster whose spoke has gone is served.
	Leases registry.LeasePolicy
	// ClustersetCIDR is where MCS ClusterSetIPs come from: at most one
	// IPv4 and one IPv6 CIDR, comma-separated.
	ClustersetCIDR string
	// Keepalive pings idle spoke connections and drops dead ones.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// ID names this replica (default: the host name).
	ID string
	// MemoryLimitRatio × the container's memory limit becomes the Go soft
	// memory limit, unless GOMEMLIMIT is set (0: leave the runtime's limit
	// alone). cmd/meshfed applies it; the hub does not read it.
	MemoryLimitRatio float64
	// GCPercent is the garbage collector's target unless GOGC is set (0:
	// Go's default, 100). cmd/meshfed applies it; the hub does not read it.
	GCPercent int
}

// DefaultGCPercent is the hub's garbage collection target: Go's default.
const DefaultGCPercent = 100

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		FederationAddr:         ":9443",
		XDSAddr:                ":15010",
		XDSPushInterval:        10 * time.Millisecond,
		XDSWarmUp:              10 * time.Second,
		XDSWarmUpQuiet:         500 * time.Millisecond,
		XDSMaxMessageBytes:     200 << 20,
		DebugAddr:              "127.0.0.1:8080",
		ClustersConfigInterval: 5 * time.Second,
		TrustDomain:            "cluster.local",
		MaxMessageBytes:        4 << 20,
		Limits:                 registry.Limits{MaxServices: 10_000, MaxEndpoints: 200_000, MaxWorkloads: 200_000},
		Leases:                 registry.DefaultLeasePolicy,
		ClustersetCIDR:         clustersetip.DefaultCIDRs,
		KeepaliveTime:          30 * time.Second,
		KeepaliveTimeout:       10 * time.Second,
		ID:                     host,
		MemoryLimitRatio:       memlimit.DefaultRatio,
		GCPercent:              DefaultGCPercent,
	}
}

// AddFlags declares the hub's flags, defaulting to c's values.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.FederationAddr, "federation-addr", c.FederationAddr, "address for spoke connections (gRPC)")
	fs.StringVar(&c.XDSAddr, "xds-addr", c.XDSAddr, `address for proxies' ADS streams (gRPC; "" disables xDS)`)
	fs.DurationVar(&c.XDSPushInterval, "xds-push-interval", c.XDSPushInterval, "push a lone change at once; coalesce changes closer together than this")
	fs.DurationVar(&c.XDSWarmUp, "xds-warmup", c.XDSWarmUp, "longest a starting hub holds proxies (unanswered) while spokes connect, counted from the first spoke's arrival and again from each member's finished sync, so that none gets a partial clusterset (0: serve at once)")
	fs.DurationVar(&c.XDSWarmUpQuiet, "xds-warmup-quiet", c.XDSWarmUpQuiet, "serve before --xds-warmup once every connected spoke has sent its shard and none has joined for this long")
	fs.BoolVar(&c.XDSWorkloadAPI, "xds-workload-api", c.XDSWorkloadAPI, "serve Istio ambient's workload API to ztunnels: only for a mesh without istiod, since the hub has the clusterset's exported services but not a ztunnel's own cluster's unexported workloads, waypoints or AuthorizationPolicies (docs/ambient.md); off, ztunnel streams are refused")
	fs.IntVar(&c.XDSMaxMessageBytes, "xds-max-message-bytes", c.XDSMaxMessageBytes, "largest xDS message (a ztunnel's first response holds its whole network; ztunnel accepts 200 MiB)")
	fs.StringVar(&c.XDSCertFile, "xds-tls-cert", c.XDSCertFile, "TLS certificate for the xDS port (PEM; plaintext when unset)")
	fs.StringVar(&c.XDSKeyFile, "xds-tls-key", c.XDSKeyFile, "TLS key for the xDS port (PEM)")
	fs.StringVar(&c.XDSCAFile, "xds-tls-ca", c.XDSCAFile, "CA of proxy client certificates; when set, proxies must present one")
	fs.BoolVar(&c.XDSPlaintext, "xds-plaintext", c.XDSPlaintext, "serve plaintext xDS on an address beyond loopback (without --xds-tls-*, any client that reaches the port can read every network's endpoints)")
	fs.Float64Var(&c.XDSStreamRate, "xds-stream-rate", c.XDSStreamRate, "new xDS streams a second one source IP may open once it has spent --xds-stream-burst (0: 20; negative: no limit; loopback is exempt)")
	fs.IntVar(&c.XDSStreamBurst, "xds-stream-burst", c.XDSStreamBurst, "new xDS streams one source IP may open at once (0: 100)")
	fs.StringVar(&c.DebugAddr, "debug-addr", c.DebugAddr, "address for /debug, /healthz, /readyz and /metrics (HTTP; keep it local)")
	debughttp.AddFlags(fs, &c.DebugCmdline, &c.DebugHosts)
	fs.StringVar(&c.ClustersConfig, "clusters-config", c.ClustersConfig, "cluster policy file (YAML): which clusters may join and what each may publish; reloaded when it changes (unset: any certificate of the CA may join)")
	fs.DurationVar(&c.ClustersConfigInterval, "clusters-config-interval", c.ClustersConfigInterval, "how often the cluster policy file is read for changes")
	fs.StringVar(&c.CertFile, "tls-cert", c.CertFile, "the hub's TLS certificate (PEM)")
	fs.StringVar(&c.KeyFile, "tls-key", c.KeyFile, "the hub's TLS key (PEM)")
	fs.StringVar(&c.CAFile, "tls-ca", c.CAFile, "the CA that signs spoke certificates (PEM)")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "serve plaintext and trust each spoke's claimed cluster (local testing only)")
	fs.StringVar(&c.TrustDomain, "trust-domain", c.TrustDomain, "trust domain of spoke identities spiffe://<trust-domain>/meshfed/cluster/<id>")
	fs.StringVar(&c.Clusterset, "clusterset", c.Clusterset, `the clusterset this hub serves: a spoke whose cluster's About API (ClusterProperty clusterset.k8s.io) names another is refused ("": none is)`)
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest federation message accepted or sent")
	fs.IntVar(&c.Limits.MaxServices, "max-services-per-cluster", c.Limits.MaxServices, "cap on a cluster's exported services (0: none)")
	fs.IntVar(&c.Limits.MaxEndpoints, "max-endpoints-per-cluster", c.Limits.MaxEndpoints, "cap on a cluster's endpoints (0: none)")
	fs.IntVar(&c.Limits.MaxWorkloads, "max-workloads-per-cluster", c.Limits.MaxWorkloads, "cap on a cluster's workloads (0: none)")
	fs.DurationVar(&c.Leases.StaleAfter, "stale-after", c.Leases.StaleAfter, "serve a cluster whose spoke has gone this long after every live cluster (stale)")
	fs.DurationVar(&c.Leases.WithdrawAfter, "withdraw-after", c.Leases.WithdrawAfter, "stop serving a cluster whose spoke has gone this long (withdrawn; 0: never)")
	fs.StringVar(&c.ClustersetCIDR, "clusterset-cidr", c.ClustersetCIDR, "CIDRs of MCS ClusterSetIPs, at most one IPv4 and one IPv6, comma-separated (the default IPv4 range is reserved, so in no cluster's ranges; every hub replica must have the same)")
	fs.DurationVar(&c.KeepaliveTime, "keepalive-time", c.KeepaliveTime, "ping a spoke connection idle for this long")
	fs.DurationVar(&c.KeepaliveTimeout, "keepalive-timeout", c.KeepaliveTimeout, "drop a spoke connection whose ping is unanswered for this long")
	fs.StringVar(&c.ID, "id", c.ID, "name of this hub replica")
	fs.Float64Var(&c.MemoryLimitRatio, "memory-limit-ratio", c.MemoryLimitRatio, "share of the container's memory limit (cgroup) that becomes the Go soft memory limit, unless GOMEMLIMIT is set (0 turns this off)")
	fs.IntVar(&c.GCPercent, "gc-percent", c.GCPercent, "garbage collection target as GOGC, unless GOGC is set (0: Go's default, 100); lower trades CPU for memory")
}

// Validate reports the first problem in c.
func (c Config) Validate() error {
	var errs []error
	if c.FederationAddr == "" {
		errs = append(errs, errors.New("--federation-addr is required"))
	}
	if !c.Insecure && (c.CertFile == "" || c.KeyFile == "" || c.CAFile == "") {
		errs = append(errs, errors.New("--tls-cert, --tls-key and --tls-ca are required (or --insecure for plaintext)"))
	}
	if (c.XDSCertFile == "") != (c.XDSKeyFile == "") || (c.XDSCAFile != "" && c.XDSCertFile == "") {
		errs = append(errs, errors.New("--xds-tls-cert and --xds-tls-key go together, and --xds-tls-ca needs them"))
	}
	if c.XDSAddr != "" && c.XDSCertFile == "" && !c.Insecure && !c.XDSPlaintext && !cli.LoopbackAddr(c.XDSAddr) {
		errs = append(errs, fmt.Errorf("--xds-addr %s would serve plaintext xDS beyond loopback: set --xds-tls-cert and --xds-tls-key (with --xds-tls-ca proxies must present certificates), or accept plaintext with --xds-plaintext", c.XDSAddr))
	}
	if c.XDSStreamBurst < 0 {
		errs = append(errs, fmt.Errorf("--xds-stream-burst %d is negative", c.XDSStreamBurst))
	}
	if c.MaxMessageBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("--max-message-bytes %d is below 64 KiB", c.MaxMessageBytes))
	}
	if c.Limits.MaxServices < 0 || c.Limits.MaxEndpoints < 0 || c.Limits.MaxWorkloads < 0 {
		errs = append(errs, errors.New("per-cluster caps cannot be negative"))
	}
	if err := c.Leases.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--stale-after, --withdraw-after: %w", err))
	}
	if c.ClustersConfig != "" && c.ClustersConfigInterval <= 0 {
		errs = append(errs, fmt.Errorf("--clusters-config-interval %v must be positive", c.ClustersConfigInterval))
	}
	if _, err := clustersetip.ParsePools(c.ClustersetCIDR); err != nil {
		errs = append(errs, fmt.Errorf("--clusterset-cidr: %w", err))
	}
	if c.TrustDomain == "" {
		errs = append(errs, errors.New("--trust-domain is required"))
	}
	if c.XDSWarmUp < 0 || c.XDSWarmUpQuiet < 0 {
		errs = append(errs, errors.New("--xds-warmup and --xds-warmup-quiet cannot be negative"))
	}
	if !(c.MemoryLimitRatio >= 0 && c.MemoryLimitRatio < 1) {
		errs = append(errs, fmt.Errorf("--memory-limit-ratio %v is outside [0, 1) (0 turns it off)", c.MemoryLimitRatio))
	}
	if c.GCPercent < 0 {
		errs = append(errs, fmt.Errorf("--gc-percent %d is negative (0 keeps Go's default)", c.GCPercent))
	}
	return errors.Join(errs...)
}
