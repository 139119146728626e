package main

import (
	"context"
	"errors"
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

const benchUsage = `Usage:
  meshfed bench [flags]              run the load harness and print its table
  meshfed bench baseline-hub [flags] the baseline server the harness measures meshfed against
                                     (the hub's flags; its xDS is go-control-plane's SnapshotCache)
`

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
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.Bool("short", false, "the short run of make bench (its sizes become the flags' defaults)")
	fs.IntVar(&cfg.Clusters, "clusters", cfg.Clusters, "clusters (C), each a simulated spoke")
	fs.IntVar(&cfg.Services, "services", cfg.Services, "services each cluster exports (S)")
	fs.IntVar(&cfg.Endpoints, "endpoints", cfg.Endpoints, "endpoints per cluster (E), each with its pod's workload")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "clusters exporting each service")
	clients := fs.Int("clients", cfg.Clients.Total(), "xDS clients (P)")
	mix := fs.String("mix", mixString(cfg.Clients), "percentages of gRPC (SotW), Envoy (delta) and ztunnel (workload API) clients")
	fs.IntVar(&cfg.Subscriptions, "subscriptions", cfg.Subscriptions, "services each gRPC or Envoy client calls")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "endpoint changes per second (R), spread over the clusters")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the churn lasts")
	servers := fs.String("servers", strings.Join(cfg.Servers, ","), "servers to measure: meshfed, baseline, or both")
	fs.BoolVar(&cfg.Restart, "restart", cfg.Restart, "also measure convergence after a hub restart")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "bound on each wait (syncs, convergence, the last changes)")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file")
	fs.Func("hub-env", "KEY=VALUE added to the hub processes' environment (repeatable), e.g. GOGC=200", func(kv string) error {
		cfg.HubEnv = append(cfg.HubEnv, kv)
		return nil
	})
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "save each hub's heap profile (clients synced) and CPU profile (over the churn) here")
	logDir := fs.String("log-dir", "", "where the hub processes' logs go (default: a new temporary directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if cfg.Clients, err = parseMix(*mix, *clients); err != nil {
		return err
	}
	cfg.Servers = strings.Split(*servers, ",")
	if cfg.Binary, err = os.Executable(); err != nil {
		return fmt.Errorf("finding the meshfed executable: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *logDir == "" {
		*logDir, err = os.MkdirTemp("", "meshfed-bench-")
	} else {
		err = os.MkdirAll(*logDir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("--log-dir: %w", err)
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("--profile-dir: %w", err)
		}
	}
	fmt.Fprintf(stderr, "hub logs in %s\n", *logDir)
	rep, err := bench.Run(ctx, cfg, *logDir, stderr)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if *jsonPath != "" {
		b, err := rep.JSON()
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
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
	log, err := cli.ParseCommand("meshfed bench baseline-hub", args, stderr, cfg.AddFlags)
	if err != nil {
		return err
	}
	return bench.RunBaselineHub(ctx, cfg, log)
}
