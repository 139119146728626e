package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
	"github.com/meshfed/meshfed/hub/clustersetip"
	"github.com/meshfed/meshfed/hub/debug"
	"github.com/meshfed/meshfed/hub/imports"
	"github.com/meshfed/meshfed/hub/ingest"
	"github.com/meshfed/meshfed/hub/policy"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/hub/ui"
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/memlimit"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/version"
	"github.com/meshfed/meshfed/xds"
)

// Hub is a running hub's components. Its listeners are bound by New, so
// their addresses are known before Run.
type Hub struct {
	cfg      Config
	log      *slog.Logger
	registry *registry.Registry
	grpc     *grpc.Server
	http     *http.Server
	fedLis   net.Listener
	debugLis net.Listener
	xds      *xds.Server // nil when xDS is disabled
	// serving is true from the start of Run until its context ends: a
	// hub that is shutting down reports not ready, so that its Service
	// sends new spokes and proxies to the other replicas.
	serving atomic.Bool
	// policyData is the cluster policy file as read at start.
	policyData    []byte
	policyReloads *prometheus.CounterVec
	// warm is true once the xDS server serves (its warm-up ended), or
	// from the start when xDS is disabled.
	warm atomic.Bool
	// registryWarm is closed when the warm-up ends (with or without
	// xDS): spokes are then told what to import.
	registryWarm chan struct{}
}

// New builds a hub and binds its listeners.
func New(cfg Config, log *slog.Logger) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var pol *policy.Policy
	var polData []byte
	if cfg.ClustersConfig != "" {
		var err error
		if pol, polData, err = policy.Load(cfg.ClustersConfig, cfg.TrustDomain); err != nil {
			return nil, fmt.Errorf("--clusters-config: %w", err)
		}
		log.Info("cluster policy in force", "path", cfg.ClustersConfig, "clusters", len(pol.Clusters()))
	} else if !cfg.Insecure {
		log.Warn("no --clusters-config: any certificate the CA signed may join the clusterset, and each cluster may claim any network, trust domain and gateway")
	}
	pools, _ := clustersetip.ParsePools(cfg.ClustersetCIDR) // validated
	reg := registry.New(registry.Config{Limits: cfg.Limits, Leases: cfg.Leases, Policy: pol, ClustersetPools: pools, Log: log.With("component", "registry")})
	// Spokes are told what to import once the registry is warm.
	serving := make(chan struct{})
	auth := ingest.Authenticator(ingest.PeerCertificate{TrustDomain: cfg.TrustDomain})
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.ForceServerCodecV2(ingest.Codec{}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveTime / 2, PermitWithoutStream: true}),
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		debug.NewClusterCollector(reg), version.NewCollector())
	handshakeFailures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshfed_hub_tls_handshake_failures_total",
		Help: "TLS handshakes that failed, by listener (federation, xds) and reason; the hub logs each peer's first failure a minute.",
	}, []string{"listener", "reason"})
	promReg.MustRegister(handshakeFailures)
	observe := func(listener string, tlsLog *slog.Logger) func(credentials.TransportCredentials) credentials.TransportCredentials {
		for _, r := range pki.HandshakeFailureReasons() {
			handshakeFailures.WithLabelValues(listener, r)
		}
		return func(c credentials.TransportCredentials) credentials.TransportCredentials {
			return pki.ObservedCredentials(c, tlsLog, func(reason string) { handshakeFailures.WithLabelValues(listener, reason).Inc() })
		}
	}
	expiring := map[string]pki.Expiring{}
	if cfg.Insecure {
		auth = ingest.Insecure
		log.Warn("serving plaintext federation: spokes are trusted to name their own cluster")
	} else {
		tlsLog := log.With("component", "tls")
		kp, err := pki.LoadKeyPair(cfg.CertFile, cfg.KeyFile, tlsLog)
		if err != nil {
			return nil, fmt.Errorf("federation TLS: %w", err)
		}
		cas, err := pki.LoadBundle(cfg.CAFile, tlsLog)
		if err != nil {
			return nil, fmt.Errorf("federation TLS: %w", err)
		}
		expiring["federation"], expiring["ca"] = kp, cas
		opts = append(opts, grpc.Creds(observe("federation", tlsLog)(credentials.NewTLS(pki.NewServerConfig(kp, cas)))))
	}
	srv := ingest.NewServer(ingest.Config{
		MaxMessageBytes: cfg.MaxMessageBytes, HubID: cfg.ID, Build: version.Version(), Clusterset: cfg.Clusterset,
		Imports: func(id federation.ClusterID, want syncproto.ImportsWanted) syncproto.ImportsFeed {
			return imports.NewFeed(id, want, reg.Current, serving)
		},
	}, reg, auth, ingest.NewMetrics(promReg), log.With("component", "ingest"))
	g := grpc.NewServer(opts...)
	federationpb.RegisterFederationServer(g, srv)

	h := &Hub{cfg: cfg, log: log, registry: reg, grpc: g, policyData: polData, registryWarm: serving}
	if cfg.ClustersConfig != "" {
		h.policyReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_hub_cluster_policy_reloads_total",
			Help: "Changes of the cluster policy file, by result: applied, or refused (the last good policy stays; the hub's log says why).",
		}, []string{"result"})
		h.policyReloads.WithLabelValues("applied")
		h.policyReloads.WithLabelValues("refused")
		promReg.MustRegister(h.policyReloads)
	}
	var err error
	if h.fedLis, err = net.Listen("tcp", cfg.FederationAddr); err != nil {
		return nil, fmt.Errorf("federation listener: %w", err)
	}
	if cfg.XDSAddr != "" {
		if h.xds, err = newXDS(cfg, reg, promReg, expiring, observe, log); err != nil {
			_ = h.fedLis.Close()
			return nil, err
		}
	}
	if len(expiring) > 0 {
		promReg.MustRegister(pki.NewExpiryCollector("meshfed_hub", expiring))
	}
	if cfg.DebugAddr != "" {
		if h.debugLis, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			_ = h.fedLis.Close()
			return nil, fmt.Errorf("debug listener: %w", err)
		}
		extra := map[string]http.Handler{}
		view := ui.Inputs{Status: reg.Status, Current: reg.Current, Gather: promReg.Gather, Now: time.Now}
		if h.xds != nil {
			extra["GET /debug/proxies"] = h.xds.ProxiesHandler()
			extra["GET /debug/xds"] = h.xds.SetsHandler()
			extra["GET /debug/explain"] = h.xds.ExplainHandler()
			view.Proxies = func() []ui.Proxy { return uiProxies(h.xds.Proxies()) }
		}
		maps.Copy(extra, ui.Handlers(ui.SourceFunc(view.Build)))
		h.http = &http.Server{
			Handler: debug.HandlerWithOptions(reg, promReg, h.Ready, extra, debug.Options{
				Cmdline: cfg.DebugCmdline, Addr: h.debugLis.Addr(), Hosts: cfg.DebugHosts, Healthy: h.Healthy,
			}),
			ReadHeaderTimeout: 10 * time.Second,
		}
	}
	return h, nil
}

func newXDS(cfg Config, reg *registry.Registry, promReg prometheus.Registerer, expiring map[string]pki.Expiring,
	observe func(listener string, log *slog.Logger) func(credentials.TransportCredentials) credentials.TransportCredentials, log *slog.Logger,
) (*xds.Server, error) {
	xcfg := xds.Config{
		Addr: cfg.XDSAddr, PushInterval: cfg.XDSPushInterval, MaxMessageBytes: cfg.XDSMaxMessageBytes, TrustDomain: cfg.TrustDomain,
		StreamRate: cfg.XDSStreamRate, StreamBurst: cfg.XDSStreamBurst, WorkloadAPI: cfg.XDSWorkloadAPI, Authorize: proxyAuthorizer(cfg.TrustDomain, reg),
		ClusterNotes: func(id federation.ClusterID) string {
			for _, st := range reg.Status() {
				if st.ID == id && st.PolicyRefusals > 0 {
					return st.LastNackReason
				}
			}
			return ""
		},
	}
	xlog := log.With("component", "xds-tls")
	if cfg.XDSCertFile != "" {
		kp, err := pki.LoadKeyPair(cfg.XDSCertFile, cfg.XDSKeyFile, xlog)
		if err != nil {
			return nil, fmt.Errorf("xds TLS: %w", err)
		}
		expiring["xds"] = kp
		xcfg.TLS, xcfg.WrapCreds = pki.NewServerOnlyConfig(kp), observe("xds", xlog)
		if cfg.XDSCAFile != "" {
			cas, err := pki.LoadBundle(cfg.XDSCAFile, xlog)
			if err != nil {
				return nil, fmt.Errorf("xds TLS: %w", err)
			}
			expiring["xds_ca"] = cas
			xcfg.TLS = pki.NewServerConfig(kp, cas)
		}
	} else if !cli.LoopbackAddr(cfg.XDSAddr) {
		log.Warn("serving plaintext xDS beyond loopback: any client that reaches the port may claim any proxy identity and read every network's endpoints",
			"addr", cfg.XDSAddr)
	}
	return xds.New(xcfg, promReg, log.With("component", "xds"))
}

// proxyAuthorizer admits a proxy whose identity is in the trust domain of
// the cluster it claims, as the xDS server's default does, and, under a
// cluster policy, in one the policy lists for that cluster.
func proxyAuthorizer(defaultTrustDomain string, reg *registry.Registry) xds.Authorizer {
	base := xds.TrustDomainAuthorizer(defaultTrustDomain)
	return func(id *url.URL, p xds.Proxy, clusters []*clusterset.ClusterInfo) error {
		if err := base(id, p, clusters); err != nil {
			return err
		}
		pol := reg.Policy()
		if pol == nil {
			return nil
		}
		if p.Cluster == "" {
			return fmt.Errorf("under a cluster policy a proxy must name its cluster (CLUSTER_ID) so that its network %q can be checked", p.Network)
		}
		c := pol.Cluster(p.Cluster)
		if c == nil {
			return fmt.Errorf("%w: the cluster policy does not name the claimed cluster %q", xds.ErrClusterTrustDomain, p.Cluster)
		}
		if !slices.Contains(c.TrustDomains, id.Host) {
			return fmt.Errorf("%w: the cluster policy gives cluster %q the trust domains %v, not %q", xds.ErrClusterTrustDomain, p.Cluster, c.TrustDomains, id.Host)
		}
		// The network decides which pod IPs the proxy is sent: it must be
		// one of its cluster's.
		if !slices.Contains(c.Networks, string(p.Network)) {
			return fmt.Errorf("the cluster policy gives cluster %q the networks %v, not the claimed %q", p.Cluster, c.Networks, p.Network)
		}
		return nil
	}
}

// uiProxies is what the web view shows of the proxies.
func uiProxies(ps []xds.ProxyStatus) []ui.Proxy {
	out := make([]ui.Proxy, 0, len(ps))
	for _, p := range ps {
		u := ui.Proxy{ID: p.ID, Kind: p.Kind, Cluster: p.Cluster, Network: p.Network, Types: map[string]string{}}
		for typeURL, t := range p.Types {
			u.Types[typeURL[strings.LastIndexByte(typeURL, '.')+1:]] = t.State
		}
		out = append(out, u)
	}
	return out
}

// XDS is the hub's xDS server, or nil when disabled.
func (h *Hub) XDS() *xds.Server { return h.xds }

// XDSAddr is the bound xDS address, or nil when disabled.
func (h *Hub) XDSAddr() net.Addr {
	if h.xds == nil {
		return nil
	}
	return h.xds.Addr()
}

// Registry is the hub's registry.
func (h *Hub) Registry() *registry.Registry { return h.registry }

// FederationAddr is the bound federation address.
func (h *Hub) FederationAddr() net.Addr { return h.fedLis.Addr() }

// DebugAddr is the bound debug address, or nil when disabled.
func (h *Hub) DebugAddr() net.Addr {
	if h.debugLis == nil {
		return nil
	}
	return h.debugLis.Addr()
}

// Ready reports whether the hub serves proxies (/readyz): from the end
// of its warm-up and its first push until it begins to stop. A replica still warming up is
// not ready, so that the proxies' Service sends them to a replica that has
// the whole clusterset; spokes reach it through the headless sync
// Service, which lists replicas that are not ready too.
func (h *Hub) Ready() bool {
	return h.serving.Load() && h.warm.Load() && (h.xds == nil || h.xds.Serving())
}

// loopStall is how long the xDS push loop may go without turning before
// /healthz fails: far longer than the longest push of a fleet, so that a
// kubelet restarts only a hub that is wedged.
const loopStall = 2 * time.Minute

// Healthy reports a hub whose loops have stopped turning (/healthz).
func (h *Hub) Healthy() error {
	if h.xds != nil {
		return h.xds.Alive(loopStall)
	}
	return nil
}

// Run serves until ctx ends, then stops gracefully.
func (h *Hub) Run(ctx context.Context) error {
	parent := ctx
	g, ctx := errgroup.WithContext(ctx)
	h.serving.Store(true)
	g.Go(func() error {
		// Stopped before it began to serve: a hub asked to stop at once.
		if err := h.grpc.Serve(h.fedLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("federation server: %w", err)
		}
		return nil
	})
	if h.http != nil {
		g.Go(func() error {
			if err := h.http.Serve(h.debugLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("debug server: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		h.registry.RunLeases(ctx)
		return nil
	})
	if h.cfg.ClustersConfig != "" {
		w := &policy.Watcher{
			Path: h.cfg.ClustersConfig, DefaultTrustDomain: h.cfg.TrustDomain, Interval: h.cfg.ClustersConfigInterval,
			Apply: func(p *policy.Policy) {
				for _, e := range h.registry.SetPolicy(p) {
					h.log.Warn("the new cluster policy no longer allows what a cluster published: dropped as if its spoke had removed it",
						"component", "policy", "cluster", e.Cluster, "dropped", e.Dropped, "withdrawn", e.Withdrawn, "first", e.Reason)
				}
			},
			Log: h.log.With("component", "policy"),
			Result: func(err error) {
				if err != nil {
					h.policyReloads.WithLabelValues("refused").Inc()
					return
				}
				h.policyReloads.WithLabelValues("applied").Inc()
			},
		}
		g.Go(func() error {
			w.Run(ctx, h.policyData)
			return nil
		})
	}
	// Neither proxies nor importing spokes are served before the
	// registry is warm: a restarted hub must not tell a spoke to delete
	// the imports of clusters still to reconnect.
	first := make(chan clusterset.Snapshot, 1)
	if h.xds == nil {
		h.warm.Store(true)
	}
	g.Go(func() error {
		snap := warmUp(ctx, h.registry, h.cfg.XDSWarmUpQuiet, h.cfg.XDSWarmUp, clock.RealClock{}, h.log.With("component", "warmup"))
		first <- snap
		h.warm.Store(true)
		if ctx.Err() == nil {
			close(h.registryWarm)
		}
		return nil
	})
	if h.xds != nil {
		g.Go(func() error { return h.xds.Run(ctx, first) })
		g.Go(func() error {
			select {
			case <-ctx.Done():
			case <-h.xds.Pushed():
				// The spokes' full states, decoded and merged, and the
				// first translation of the whole clusterset are the hub's
				// largest burst: a fleet's hub held twice its live heap
				// for minutes after it.
				memlimit.Release(h.log, "first push made; free heap returned to the OS")
			}
			return nil
		})
	}
	g.Go(func() error {
		cli.LogStopping(parent, ctx, h.log)
		h.serving.Store(false)
		h.grpc.Stop() // streams are long-lived: GracefulStop would wait for every spoke to leave
		if h.http != nil {
			shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = h.http.Shutdown(shutdown)
		}
		return nil
	})
	h.log.Info("hub serving", "version", version.String(), "federation", h.FederationAddr().String(), "xds", addrString(h.XDSAddr()),
		"debug", addrString(h.DebugAddr()), "tls", !h.cfg.Insecure)
	return g.Wait()
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
