package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/cli"
)

type benchOptions struct {
	clients                        int
	mix, servers, jsonPath, logDir string
}

// benchFlags declares the load harness's flags, with cfg's sizes as
// their defaults, on fs.
func benchFlags(fs *flag.FlagSet, cfg *bench.Config) *benchOptions {
	o := &benchOptions{}
	fs.Bool("short", false, "the short run of make bench (its sizes become the flags' defaults)")
	fs.IntVar(&cfg.Clusters, "clusters", cfg.Clusters, "clusters (C), each a simulated spoke")
	fs.IntVar(&cfg.Services, "services", cfg.Services, "services each cluster exports (S)")
	fs.IntVar(&cfg.Endpoints, "endpoints", cfg.Endpoints, "endpoints per cluster (E), each with its pod's workload")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "clusters exporting each service")
	fs.IntVar(&o.clients, "clients", cfg.Clients.Total(), "xDS clients (P)")
	fs.StringVar(&o.mix, "mix", mixString(cfg.Clients), "percentages of gRPC (SotW), Envoy (delta) and ztunnel (workload API) clients")
	fs.IntVar(&cfg.Subscriptions, "subscriptions", cfg.Subscriptions, "services each gRPC or Envoy client calls")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "endpoint changes per second (R), spread over the clusters")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the churn lasts")
	fs.StringVar(&o.servers, "servers", strings.Join(cfg.Servers, ","), "servers to measure: meshfed, baseline, or both")
	fs.BoolVar(&cfg.Restart, "restart", cfg.Restart, "also measure convergence after a hub restart")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "bound on each wait (syncs, convergence, the last changes)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.Func("hub-env", "KEY=VALUE added to the hub processes' environment (repeatable), e.g. GOGC=200", func(kv string) error {
		cfg.HubEnv = append(cfg.HubEnv, kv)
		return nil
	})
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "save each hub's heap profiles (spokes synced, clients synced, after the churn) and CPU profiles (the churn, the restart) here, and the harness's own CPU profile over the restart")
	fs.StringVar(&o.logDir, "log-dir", "", "where the hub processes' logs go (default: a new temporary directory)")
	return o
}

var benchHelp = cli.Help{
	Args: "[flags]\n  meshfed bench baseline-hub [flags]",
	Summary: "Run the load harness (BENCHMARKS.md): C simulated spokes, P xDS clients and R endpoint changes a second\n" +
		"against a meshfed hub process, then the same against a baseline (go-control-plane's SnapshotCache),\n" +
		"and print a table with the ratios. 'meshfed bench baseline-hub' is that baseline server (the hub's flags).",
	Groups: []cli.FlagGroup{
		{Title: "Size", Flags: []string{"short", "clusters", "services", "endpoints", "replicas", "clients", "mix", "subscriptions"}},
		{Title: "Run", Flags: []string{"rate", "duration", "servers", "restart", "timeout", "hub-env"}},
		{Title: "Results", Flags: []string{"json", "profile-dir", "log-dir"}},
	},
	Examples: []string{
		"# What make bench runs\nmeshfed bench --short",
		"meshfed bench --clusters 10 --endpoints 1000 --clients 100 --json bench.json",
	},
}

var baselineHubHelp = cli.Help{
	Summary: "The baseline server the load harness measures meshfed against: the hub's federation and flags,\n" +
		"with go-control-plane's SnapshotCache (one snapshot per node) serving xDS.",
	Groups: hub.Help.Groups,
}

// runBench runs the load harness (BENCHMARKS.md): C simulated spokes, P xDS
// clients and churn against a `meshfed hub` process, then the same against
// the baseline, and prints the figures with their ratios.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "baseline-hub" {
		return runBaselineHub(ctx, args[1:], stderr)
	}
	cfg := bench.DefaultConfig()
	if slices.ContainsFunc(args, func(a string) bool { return a == "--short" || a == "-short" || a == "--short=true" }) {
		cfg = bench.ShortConfig()
	}
	fs := cli.NewFlagSet("meshfed bench", stderr)
	o := benchFlags(fs, &cfg)
	benchHelp.Install(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if cfg.Clients, err = parseMix(o.mix, o.clients); err != nil {
		return err
	}
	cfg.Servers = strings.Split(o.servers, ",")
	if cfg.Binary, err = os.Executable(); err != nil {
		return fmt.Errorf("finding the meshfed executable: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if o.logDir == "" {
		o.logDir, err = os.MkdirTemp("", "meshfed-bench-")
	} else {
		err = os.MkdirAll(o.logDir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("--log-dir: %w", err)
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("--profile-dir: %w", err)
		}
	}
	fmt.Fprintf(stderr, "hub logs in %s\n", o.logDir)
	rep, err := bench.Run(ctx, cfg, o.logDir, stderr)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if o.jsonPath != "" {
		b, err := rep.JSON()
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	return nil
}

func mixString(m bench.Mix) string {
	t := float64(m.Total())
	return fmt.Sprintf("grpc=%g,envoy=%g,ztunnel=%g", 100*float64(m.GRPC)/t, 100*float64(m.Envoy)/t, 100*float64(m.Ztunnel)/t)
}

// parseMix splits total clients by "grpc=60,envoy=38,ztunnel=2"
// (percentages summing to 100); gRPC clients take the rounding.
func parseMix(s string, total int) (bench.Mix, error) {
	pct := map[string]float64{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || f < 0 || (k != "grpc" && k != "envoy" && k != "ztunnel") {
			return bench.Mix{}, fmt.Errorf("--mix %q: want grpc=N,envoy=N,ztunnel=N in percent", s)
		}
		pct[k] = f
	}
	if sum := pct["grpc"] + pct["envoy"] + pct["ztunnel"]; sum < 99.9 || sum > 100.1 {
		return bench.Mix{}, fmt.Errorf("--mix %q: the percentages add up to %g, want 100", s, sum)
	}
	if total < 1 {
		return bench.Mix{}, errors.New("--clients: want at least 1")
	}
	m := bench.Mix{
		Envoy:   int(float64(total)*pct["envoy"]/100 + 0.5),
		Ztunnel: int(float64(total)*pct["ztunnel"]/100 + 0.5),
	}
	m.GRPC = max(total-m.Envoy-m.Ztunnel, 0)
	return m, nil
}

func runBaselineHub(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := hub.DefaultConfig()
	log, err := cli.ParseCommand("meshfed bench baseline-hub", args, stderr, cfg.AddFlags, baselineHubHelp)
	if err != nil {
		return err
	}
	return bench.RunBaselineHub(ctx, cfg, log)
}
