package spoke

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/grpccodec"
	"github.com/meshfed/meshfed/internal/memlimit"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/version"
	"github.com/meshfed/meshfed/spoke/about"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/kubeclient"
	"github.com/meshfed/meshfed/spoke/mcp"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/remoteview"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/source/file"
	"github.com/meshfed/meshfed/spoke/source/kube"
	"github.com/meshfed/meshfed/spoke/uplink"
	"github.com/meshfed/meshfed/spoke/writeback"
)

// Spoke is a configured spoke, ready to run.
type Spoke struct {
	cfg Config
	// clusterset is the one the cluster's About API names ("": none).
	clusterset string
	log        *slog.Logger
	tracker    *shard.Tracker
	builder    *shard.Builder
	source     source
	// writeBack writes into the cluster what the spoke and the clusterset
	// decided; nil for the file source, which writes nothing.
	writeBack *writeback.WriteBack
	hubs      *hubSet
	// metrics is what the debug server's /metrics serves.
	metrics *prometheus.Registry
	// keyPair and cas are the TLS material every hub link shares; nil
	// with --insecure.
	keyPair *pki.KeyPair
	cas     *pki.Bundle
	// ready: a hub replica has acknowledged the shard's full state, which
	// the spoke sends only once the source's caches have synced.
	ready atomic.Bool
	// imports are the clusterset's imports as the hub replicas send them,
	// for the source to write into the cluster (writes) and for the MCP
	// server to serve istiod; nil when neither wants them.
	imports *imports.Store
	writes  bool
	// mcp serves the cluster's istiod (nil without --mcp-addr).
	mcp *mcp.Server
	// views serves the cluster's istiod each other member as a remote
	// cluster (nil without --remote-views-addr); secrets writes istiod
	// the remote secrets of those views (nil without --remote-views-url).
	views   *remoteview.Server
	secrets *remoteview.Secrets
	// election is nil without --leader-elect; synced: the source has
	// delivered its caches' content.
	election *election
	synced   atomic.Bool
}

// Ready reports whether the spoke has federated its cluster: its caches
// synced and a hub replica acknowledged the full state (/readyz). It stays
// true while hubs come and go: the spoke's own work is done, and a hub
// replica that lost it is asked for again by the spoke. A standby (under
// --leader-elect) is ready once its caches have synced: it can take over
// at once, and the pod's readiness gates only rollouts, which must not
// wait on a standby for what only the leader does.
func (s *Spoke) Ready() bool {
	if !s.election.leading() {
		return s.synced.Load()
	}
	return s.ready.Load()
}

// source is where the cluster's objects come from.
type source interface {
	Run(ctx context.Context, fn func(in normalize.Inputs, changes []normalize.Change)) error
}

var (
	_ source = (*file.Source)(nil)
	_ source = (*kube.Source)(nil)
)

// New builds a spoke from cfg. It does not connect yet; it reads the
// cluster's About API (bounded by ctx and aboutTimeout).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Spoke, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	props, err := readAbout(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	flagID := cfg.ClusterID
	if cfg.ClusterID, err = about.ResolveClusterID(cfg.ClusterID, props); err != nil {
		return nil, err
	}
	if err := federation.ValidateCluster(&federationpb.Cluster{Id: cfg.ClusterID, Network: cfg.Network, TrustDomain: cfg.TrustDomain}); err != nil {
		return nil, fmt.Errorf("--cluster-id, --network or --trust-domain: %w", err)
	}
	log = log.With("cluster", cfg.ClusterID)
	var kp *pki.KeyPair
	var cas *pki.Bundle
	if !cfg.Insecure {
		if kp, cas, err = loadTLS(cfg, log.With("component", "tls")); err != nil {
			if props.ClusterID != "" {
				// Name every source of the cluster's ID.
				return nil, fmt.Errorf("ClusterProperty %s %q, --cluster-id %q: %w", about.ClusterIDProperty, props.ClusterID, flagID, err)
			}
			return nil, err
		}
	}
	el, err := newElection(cfg, log.With("component", "leader"))
	if err != nil {
		return nil, err
	}
	metrics := prometheus.NewRegistry()
	var store, writes *imports.Store
	if cfg.Manifests == "" || cfg.MCPAddr != "" || cfg.RemoteViewsAddr != "" {
		store = imports.NewStore()
	}
	if cfg.Manifests == "" { // the file source writes nothing
		writes = store
	}
	src, wb, core, err := newSource(cfg, writes, metrics, log, el.holdWrites()...)
	if err != nil {
		return nil, err
	}
	targets, err := parseHubs(cfg.Hub)
	if err != nil {
		return nil, err
	}
	uplinks := uplink.NewMetrics()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), uplinks, version.NewCollector(), leaderGauge(el))
	if !cfg.Insecure {
		metrics.MustRegister(pki.NewExpiryCollector("meshfed_spoke", map[string]pki.Expiring{"federation": kp, "ca": cas}))
	}
	t := shard.NewTracker()
	s := &Spoke{
		cfg:        cfg,
		clusterset: props.Clusterset,
		log:        log,
		tracker:    t,
		builder:    shard.NewBuilder(cfg.normalizeOptions(), t, log.With("component", "builder"), builderOptions(wb, metrics)...),
		source:     src,
		writeBack:  wb,
		metrics:    metrics,
		keyPair:    kp,
		cas:        cas,
		election:   el,
		imports:    store,
		writes:     writes != nil,
	}
	if cfg.MCPAddr != "" {
		s.mcp, err = mcp.New(mcp.Config{
			Addr: cfg.MCPAddr, InitialWait: cfg.MCPInitialWait,
			Entries: mcp.Entries{Cluster: cfg.ClusterID, Domain: cfg.DomainSuffix},
		}, store, log.With("component", "mcp"))
		if err != nil {
			return nil, err
		}
	}
	if cfg.RemoteViewsAddr != "" {
		var token string
		if cfg.RemoteViewsTokenFile != "" {
			b, err := os.ReadFile(cfg.RemoteViewsTokenFile)
			if err != nil {
				return nil, fmt.Errorf("--remote-views-token-file: %w", err)
			}
			if token = strings.TrimSpace(string(b)); token == "" {
				return nil, fmt.Errorf("--remote-views-token-file %s is empty", cfg.RemoteViewsTokenFile)
			}
		}
		vcfg := remoteview.Config{Addr: cfg.RemoteViewsAddr, Cluster: federation.ClusterID(cfg.ClusterID), Token: token, Metrics: metrics}
		if cfg.RemoteViewsCertFile != "" {
			if vcfg.TLS, err = pki.ServerOnlyConfig(cfg.RemoteViewsCertFile, cfg.RemoteViewsKeyFile, log.With("component", "remote-views-tls")); err != nil {
				return nil, fmt.Errorf("--remote-views-tls-cert, --remote-views-tls-key: %w", err)
			}
		}
		s.views, err = remoteview.NewServer(vcfg, store, log.With("component", "remote-views"))
		if err != nil {
			return nil, err
		}
		if cfg.RemoteViewsURL != "" {
			if s.secrets, err = newRemoteSecrets(cfg, token, s.views, core, metrics, log); err != nil {
				return nil, err
			}
		}
	}
	members := &syncproto.Members{}
	s.hubs = &hubSet{
		targets: targets, interval: cfg.HubResolveInterval, lookup: net.DefaultResolver.LookupHost, log: log,
		open: func(addr, serverName string) (hubLink, error) { return s.openHub(addr, serverName, uplinks, members) },
	}
	return s, nil
}

// link is the spoke's stream of its shard to one hub replica.
type link struct {
	conn   *grpc.ClientConn
	stream *shard.Stream
	*uplink.Uplink
	metrics *uplink.Metrics
	imports *imports.Link // nil when the spoke writes no imports
}

func (l *link) Close() {
	_ = l.conn.Close()
	l.stream.Close()
	l.metrics.Remove(l.Uplink)
	if l.imports != nil {
		l.imports.Close()
	}
}

// openHub returns the link to the hub replica at addr.
func (s *Spoke) openHub(addr, serverName string, metrics *uplink.Metrics, members *syncproto.Members) (hubLink, error) {
	creds := insecure.NewCredentials()
	if !s.cfg.Insecure {
		if s.cfg.ServerName != "" {
			serverName = s.cfg.ServerName
		}
		creds = credentials.NewTLS(pki.NewClientConfig(s.keyPair, s.cas, serverName))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: s.cfg.KeepaliveTime, Timeout: s.cfg.KeepaliveTime / 3, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(s.cfg.MaxMessageBytes), grpc.MaxCallRecvMsgSize(s.cfg.MaxMessageBytes),
			grpc.ForceCodecV2(grpccodec.Codec{})), // the initial sync's chunks are megabytes: not pooled
	)
	if err != nil {
		return nil, fmt.Errorf("hub %q: %w", addr, err)
	}
	client := federationpb.NewFederationClient(conn)
	dial := func(ctx context.Context) (uplink.Stream, error) { return client.Sync(ctx) }
	stream := s.tracker.Open()
	log := s.log.With("component", "uplink", "hub", addr)
	var il *imports.Link
	var ilink syncproto.ImportsLink // a nil *imports.Link would not be a nil interface
	if s.imports != nil {
		il = s.imports.Link(addr)
		ilink = il
	}
	return &link{
		conn: conn, stream: stream, metrics: metrics, imports: il,
		Uplink: uplink.New(uplink.Config{
			ClusterID: s.cfg.ClusterID, Clusterset: s.clusterset, Build: s.cfg.Build, Hub: addr, Metrics: metrics, Members: members, Imports: ilink, WritesImports: s.writes, Mesh: s.mcp != nil, RemoteViews: s.views != nil,
			MaxMessageBytes: s.cfg.MaxMessageBytes, AckTimeout: s.cfg.AckTimeout,
			FullAcked: func() {
				s.ready.Store(true)
				// Building and sending a full state (the first, or after
				// the hub lost the shard) is the spoke's largest burst.
				memlimit.Release(log, "hub has the full state; free heap returned to the OS")
			},
		}, stream, dial, log),
	}, nil
}

// aboutTimeout bounds the start's reads of the About API.
const aboutTimeout = 30 * time.Second

// readAbout reads the cluster's About API, for a Kubernetes source. A spoke
// given --cluster-id starts when the API cannot be read (the API server is
// down, or the spoke may not read ClusterProperties), with a warning: its
// caches wait for the API server anyway.
func readAbout(ctx context.Context, cfg Config, log *slog.Logger) (about.Properties, error) {
	if cfg.Manifests != "" {
		return about.Properties{}, nil
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return about.Properties{}, err
	}
	clients, err := kubeclient.New(rc, kubeclient.Options{})
	if err != nil {
		return about.Properties{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, aboutTimeout)
	defer cancel()
	p, err := about.Read(ctx, clients.Core)
	if err != nil {
		if cfg.ClusterID == "" {
			return about.Properties{}, fmt.Errorf("no --cluster-id, and the cluster's About API cannot be read: %w", err)
		}
		log.Warn("the cluster's About API cannot be read: going on with --cluster-id, unchecked", "err", err)
		return about.Properties{}, nil
	}
	if p != (about.Properties{}) {
		log.Info("the cluster's About API", "cluster_id", p.ClusterID, "clusterset", p.Clusterset)
	}
	return p, nil
}

// loadTLS loads the spoke's key pair and the hub's CA bundle, and checks
// that the certificate names the cluster: the hub binds a stream to the
// cluster its client certificate names, so a spoke with another cluster's
// certificate would be refused at every reconnect.
func loadTLS(cfg Config, log *slog.Logger) (*pki.KeyPair, *pki.Bundle, error) {
	kp, err := pki.LoadKeyPair(cfg.CertFile, cfg.KeyFile, log)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	want := federation.ClusterSPIFFEID(cfg.TrustDomain, federation.ClusterID(cfg.ClusterID))
	if err := pki.CheckSPIFFEID(kp.Leaf(), want); err != nil {
		return nil, nil, fmt.Errorf("--tls-cert %s is not for --cluster-id %q of --trust-domain %q: %w", cfg.CertFile, cfg.ClusterID, cfg.TrustDomain, err)
	}
	cas, err := pki.LoadBundle(cfg.CAFile, log)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-ca: %w", err)
	}
	return kp, cas, nil
}

// builderOptions has the builder record its metrics in metrics and report
// rejected objects to the write-back, when there is one (it records them
// as Events and ServiceExport conditions).
func builderOptions(wb *writeback.WriteBack, metrics prometheus.Registerer) []shard.BuilderOption {
	opts := []shard.BuilderOption{shard.WithMetrics(metrics)}
	if wb != nil {
		opts = append(opts, shard.WithReporter(wb))
	}
	return opts
}

// Run federates the cluster until ctx ends.
func (s *Spoke) Run(ctx context.Context) error {
	parent := ctx
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return s.source.Run(ctx, func(in normalize.Inputs, changes []normalize.Change) {
			s.builder.Apply(in, changes)
			if s.writeBack != nil {
				s.writeBack.Changed(changes)
			}
			s.synced.Store(true)
		})
	})
	g.Go(func() error { return s.builder.Run(ctx) })
	if s.writeBack != nil {
		// A standby writes too, its requests held until it leads
		// (leader.Elector.HoldWrites).
		g.Go(func() error { return s.writeBack.Run(ctx) })
	}
	if s.mcp != nil {
		// Only the leader hears from the hubs: a standby's server answers
		// with nothing once InitialWait is over. istiod's config source
		// must reach one spoke that does not stand by (the chart allows
		// --mcp-addr with a single spoke only).
		g.Go(func() error { return s.mcp.Run(ctx) })
	}
	if s.views != nil {
		// Like the MCP server, a standby's views stay unanswered (503):
		// only the leader hears from the hubs.
		g.Go(func() error { return s.views.Run(ctx) })
	}
	if s.secrets != nil {
		g.Go(func() error { return s.secrets.Run(ctx) })
	}
	// Only the leader streams to the hub.
	g.Go(func() error { return s.election.run(ctx, s.hubs.Run) })
	if s.cfg.DebugAddr != "" {
		lis, err := net.Listen("tcp", s.cfg.DebugAddr)
		if err != nil {
			return fmt.Errorf("--debug-addr: %w", err)
		}
		g.Go(func() error {
			return serveDebugWith(ctx, lis, s.metrics, debugOptions{cmdline: s.cfg.DebugCmdline, hosts: s.cfg.DebugHosts, ready: s.Ready})
		})
	}
	g.Go(func() error {
		cli.LogStopping(parent, ctx, s.log)
		return nil
	})
	kind, location := s.cfg.source()
	s.log.Info("spoke running", "version", version.String(), "hub", s.cfg.Hub, "source", kind, "location", location, "tls", !s.cfg.Insecure)
	return g.Wait()
}

// newSource returns the source cfg selects (Validate has checked that it
// selects one), and for a Kubernetes source the write-back into its
// cluster, which writes the imports of store and registers its metrics in
// metrics; wrap wraps the transport of both.
func newSource(cfg Config, store *imports.Store, metrics prometheus.Registerer, log *slog.Logger, wrap ...transport.WrapperFunc) (source, *writeback.WriteBack, rest.Interface, error) {
	if cfg.Manifests != "" {
		return file.New(cfg.Manifests, log.With("component", "source")), nil, nil, nil
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, w := range wrap {
		rc.Wrap(w)
	}
	clients, err := kubeclient.New(rc, kubeclient.Options{ImportQPS: float32(cfg.ImportQPS), ImportBurst: cfg.ImportBurst, Log: log.With("component", "imports")})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubernetes source: %w", err)
	}
	opts := cfg.normalizeOptions()
	src := kube.New(kube.NewAPI(clients), kube.Config{Options: opts, DiscoverImports: store != nil}, log.With("component", "source"))
	wb := writeback.New(src, writeback.NewAPI(clients), writeback.Config{Options: opts, Imports: store, Metrics: metrics}, log.With("component", "writeback"))
	return src, wb, clients.Core, nil
}

// restConfig returns the config of the API server of cfg's Kubernetes
// source: --kubeconfig's, or the pod's.
func restConfig(cfg Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("in-cluster Kubernetes config: %w", err)
	}
	rc.QPS, rc.Burst = float32(cfg.KubeQPS), cfg.KubeBurst // 0: the source's defaults
	return rc, nil
}

// newRemoteSecrets returns the writer of istiod's remote secrets, over
// the core REST client of the cluster's source (whose writes are held
// while the spoke stands by, as the write-back's are).
func newRemoteSecrets(cfg Config, token string, views *remoteview.Server, core rest.Interface, metrics prometheus.Registerer, log *slog.Logger) (*remoteview.Secrets, error) {
	ca, err := os.ReadFile(cfg.RemoteViewsCAFile)
	if err != nil {
		return nil, fmt.Errorf("--remote-views-ca-file: %w", err)
	}
	return remoteview.NewSecrets(remoteview.RESTSecrets(core, cfg.RemoteViewsSecretNamespace),
		remoteview.SecretsConfig{URL: cfg.RemoteViewsURL, CA: ca, Token: token, Prefix: cfg.RemoteViewsSecretPrefix, Owner: cfg.RemoteViewsSecretOwner, Metrics: metrics}, views.Members, log.With("component", "remote-secrets")), nil
}
