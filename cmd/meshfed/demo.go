package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/examples/demo"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/echo"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/internal/tcpproxy"
	"github.com/meshfed/meshfed/internal/version"
	"github.com/meshfed/meshfed/spoke"
)

var demoClusters = []struct{ id, network string }{{"east", "network-east"}, {"west", "network-west"}}

type demoOptions struct {
	dir, fedAddr, debugAddr, xdsAddr string
	log                              cli.LogFlags
}

func demoFlags(fs *flag.FlagSet) *demoOptions {
	o := &demoOptions{log: cli.LogFlags{Level: "warn"}}
	fs.StringVar(&o.dir, "dir", "", "working directory for the manifests and certificates (default: a new temporary one)")
	fs.StringVar(&o.fedAddr, "federation-addr", "127.0.0.1:9443", "the hub's federation address")
	fs.StringVar(&o.debugAddr, "debug-addr", "127.0.0.1:8080", "the hub's debug address")
	fs.StringVar(&o.xdsAddr, "xds-addr", "127.0.0.1:15010", "the hub's xDS address")
	o.log.Add(fs)
	return o
}

var demoHelp = cli.Help{
	Args: "[flags]\n  meshfed demo client [flags]",
	Summary: "Run a hub and two spokes (east, west) on loopback, from embedded manifests it writes into --dir,\n" +
		"with a gRPC echo server per pod and an east-west gateway per cluster. Edit the manifests to see\n" +
		"the hub follow; 'meshfed demo client' calls echo through the hub's xDS.",
	Groups: []cli.FlagGroup{
		{Title: "The demo's hub", Flags: []string{"federation-addr", "xds-addr", "debug-addr"}},
		{Title: "Files and logs", Flags: []string{"dir", "log-level", "log-format"}},
	},
	Examples: []string{
		"meshfed demo",
		"# In a second terminal\nmeshfed status\nmeshfed demo client",
	},
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "client" {
		return runDemoClient(ctx, args[1:], stdout, stderr)
	}
	fset := cli.NewFlagSet("meshfed demo", stderr)
	o := demoFlags(fset)
	demoHelp.Install(fset)
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (meshfed demo client is the demo's client)", fset.Arg(0))
	}
	log, err := o.log.Logger(stderr)
	if err != nil {
		return err
	}
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "meshfed-demo-"); err != nil {
			return err
		}
	}
	if err := writeDemoFiles(o.dir); err != nil {
		return err
	}
	certs := filepath.Join(o.dir, "certs")
	ids := make([]string, 0, len(demoClusters))
	for _, c := range demoClusters {
		ids = append(ids, c.id)
	}
	if err := pki.WriteLocal(certs, "cluster.local", ids, time.Now()); err != nil {
		return fmt.Errorf("mint demo certificates: %w", err)
	}

	hcfg := hub.DefaultConfig()
	hcfg.FederationAddr, hcfg.DebugAddr, hcfg.XDSAddr, hcfg.ID = o.fedAddr, o.debugAddr, o.xdsAddr, "demo-hub"
	// The demo's spokes start with its hub and name no members: the first
	// warm-up runs to its limit, so keep it short.
	hcfg.XDSWarmUp = 2 * time.Second
	hcfg.CertFile, hcfg.KeyFile, hcfg.CAFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key"), filepath.Join(certs, "ca.crt")
	h, err := hub.New(hcfg, log.With("process", "hub"))
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return h.Run(ctx) })

	for _, c := range demoClusters {
		scfg := spoke.DefaultConfig()
		scfg.ClusterID, scfg.Network, scfg.Build = c.id, c.network, version.Version()
		scfg.Hub = h.FederationAddr().String()
		scfg.ServerName = "localhost"
		scfg.Manifests = filepath.Join(o.dir, c.id)
		scfg.CertFile, scfg.KeyFile, scfg.CAFile = filepath.Join(certs, c.id+".crt"), filepath.Join(certs, c.id+".key"), filepath.Join(certs, "ca.crt")
		s, err := spoke.New(ctx, scfg, log.With("process", "spoke"))
		if err != nil {
			return err
		}
		g.Go(func() error { return s.Run(ctx) })
		var pods []string
		for _, ip := range demo.EchoBackends()[c.id] {
			addr := net.JoinHostPort(ip, strconv.Itoa(demo.EchoPort))
			lis, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("echo backend of %s (this demo needs the loopback range 127.0.0.0/8): %w", c.id, err)
			}
			g.Go(func() error { return echo.Serve(ctx, lis, c.id) })
			pods = append(pods, addr)
		}
		// The cluster's east-west gateway: other networks reach its pods here.
		gw, err := net.Listen("tcp", net.JoinHostPort(demo.Gateways()[c.id], strconv.Itoa(demo.GatewayPort)))
		if err != nil {
			return fmt.Errorf("east-west gateway of %s: %w", c.id, err)
		}
		g.Go(func() error { return tcpproxy.Serve(ctx, gw, pods) })
	}

	g.Go(func() error {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := clusterset.Await(waitCtx, h.Registry().Current(), demoReady); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the demo clusters did not sync within 30s: %w", err)
		}
		printDemo(stdout, o.dir, h)
		return nil
	})
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(stdout, "demo stopped")
	return nil
}

// demoReady holds when every demo cluster has sent its shard and is live.
func demoReady(s clusterset.Snapshot) bool {
	for _, c := range demoClusters {
		info, ok := s.Cluster(federation.ClusterID(c.id))
		if !ok || info.State != clusterset.Live {
			return false
		}
	}
	return true
}

// writeDemoFiles copies the embedded manifests into dir, keeping files a
// user already has there (so edits survive a restart with --dir).
func writeDemoFiles(dir string) error {
	return fs.WalkDir(demo.Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if _, err := os.Stat(target); err == nil {
			return nil
		}
		data, err := demo.Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

func printDemo(w io.Writer, dir string, h *hub.Hub) {
	debugAddr := h.DebugAddr().String()
	fmt.Fprintf(w, `meshfed demo is running.

  hub          federation %s (mTLS), xds %s, debug http://%s
  spoke east   network network-east, manifests %s
  spoke west   network network-west, manifests %s
  echo pods    gRPC health on port %d of %v (east) and %v (west),
               each reply carrying the header x-meshfed-cluster
  gateways     east-west gateways (L4 forwarders) on %v:%d
  certificates %s

Look at it:
  open http://%s/ui in a browser: the live view of the clusterset
  meshfed status --debug-addr %s
  curl -s http://%s/debug/services
  curl -s http://%s/debug/proxies

Call echo as a proxyless gRPC client in east, through the hub's xDS alone:
  meshfed demo client --xds-addr %s

Edit the manifests while it runs (for example, delete both addresses from
%s/echo.yaml): the client's calls move to west (through west's gateway),
and come back when you restore them. Ctrl-C stops it.
`, h.FederationAddr(), h.XDSAddr(), debugAddr,
		filepath.Join(dir, "east"), filepath.Join(dir, "west"),
		demo.EchoPort, demo.EchoBackends()["east"], demo.EchoBackends()["west"],
		[]string{demo.Gateways()["east"], demo.Gateways()["west"]}, demo.GatewayPort,
		filepath.Join(dir, "certs"), debugAddr, debugAddr, debugAddr, debugAddr, h.XDSAddr(), filepath.Join(dir, "east"))
}
