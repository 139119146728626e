// Command meshfed is the meshfed hub, spoke and tools in one binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/bench"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/version"
	"github.com/meshfed/meshfed/spoke"
)

const usage = `meshfed federates service meshes across Kubernetes clusters.

Usage:
  meshfed hub     [flags]   run the hub: spokes connect to it
  meshfed spoke   [flags]   run a spoke: federate one cluster to the hub
  meshfed status  [flags]   show the clusters a hub knows (--wait: until they are all live and synced)
  meshfed proxies [flags]   show the proxies of a hub replica and whether each holds the newest state
  meshfed explain --proxy ID --service HOST[:PORT] [--endpoint IP]
                            explain why a proxy does or does not see a service's endpoints
  meshfed demo    [flags]   run a hub and two spokes (east, west) on loopback
  meshfed demo client       call the demo's echo through the hub's xDS, printing who answers
  meshfed certs   [flags]   mint a throwaway CA and hub/cluster certificates
  meshfed bench   [flags]   run the load harness: simulated spokes, xDS clients and churn against a hub and a baseline
  meshfed completion bash|zsh|fish
                            print a shell completion script
  meshfed version           print the version

Run 'meshfed <command> --help' (or 'meshfed help <command>') for a command's flags.
`

// command is one of meshfed's commands, as help and completion see it.
type command struct {
	name    string // as typed after meshfed: "status", "demo client"
	summary string
	// help groups the command's flags, as its --help prints them.
	help *cli.Help
	// flags declares the command's flags on fs (nil: it takes none).
	flags func(fs *flag.FlagSet)
	// words are the arguments it takes other than flags and subcommands
	// ("bash", "zsh", "fish" for completion).
	words []string
}

// commands lists every command and subcommand, for help and completion;
// run dispatches them.
func commands() []command {
	return []command{
		{name: "hub", summary: "run the hub: spokes connect to it", help: &hub.Help, flags: func(fs *flag.FlagSet) {
			cfg := hub.DefaultConfig()
			cfg.AddFlags(fs)
			new(cli.LogFlags).Add(fs)
		}},
		{name: "spoke", summary: "run a spoke: federate one cluster to the hub", help: &spoke.Help, flags: func(fs *flag.FlagSet) {
			cfg := spoke.DefaultConfig()
			cfg.AddFlags(fs)
			new(cli.LogFlags).Add(fs)
		}},
		{name: "status", summary: "show the clusters a hub knows", help: &statusHelp, flags: func(fs *flag.FlagSet) { statusFlags(fs) }},
		{name: "proxies", summary: "show the proxies of a hub replica and their sync state", help: &proxiesHelp, flags: func(fs *flag.FlagSet) { proxiesFlags(fs) }},
		{name: "explain", summary: "explain why a proxy does or does not see a service's endpoints", help: &explainHelp, flags: func(fs *flag.FlagSet) { explainFlags(fs) }},
		{name: "demo", summary: "run a hub and two spokes on loopback", help: &demoHelp, flags: func(fs *flag.FlagSet) { demoFlags(fs) }},
		{name: "demo client", summary: "call the demo's echo through the hub's xDS", help: &demoClientHelp, flags: func(fs *flag.FlagSet) { demoClientFlags(fs) }},
		{name: "certs", summary: "mint a throwaway CA and certificates", help: &certsHelp, flags: func(fs *flag.FlagSet) { certsFlags(fs) }},
		{name: "bench", summary: "run the load harness", help: &benchHelp, flags: func(fs *flag.FlagSet) {
			cfg := bench.DefaultConfig()
			benchFlags(fs, &cfg)
		}},
		{name: "bench baseline-hub", summary: "the baseline server the load harness measures meshfed against", help: &baselineHubHelp, flags: func(fs *flag.FlagSet) {
			cfg := hub.DefaultConfig()
			cfg.AddFlags(fs)
			new(cli.LogFlags).Add(fs)
		}},
		{name: "completion", summary: "print a shell completion script", words: []string{"bash", "zsh", "fish"}},
		{name: "version", summary: "print the version"},
		{name: "help", summary: "print a command's help"},
	}
}

func main() { cli.Main("meshfed", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "hub":
		return runHub(ctx, args, stderr)
	case "spoke":
		return runSpoke(ctx, args, stderr)
	case "status":
		return runStatus(ctx, args, stdout, stderr)
	case "proxies":
		return runProxies(ctx, args, stdout, stderr)
	case "explain":
		return runExplain(ctx, args, stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "certs":
		return runCerts(args, stdout, stderr)
	case "bench":
		return runBench(ctx, args, stdout, stderr)
	case "completion":
		return runCompletion(args, stdout, stderr)
	case "version", "--version", "-version":
		return runVersion(ctx, args, stdout, stderr)
	case "help", "-h", "--help", "-help":
		return runHelp(ctx, args, stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// runHelp prints the usage, or with a command's name that command's help
// (as its --help does, on stdout).
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	name := strings.Join(args, " ")
	if !slices.ContainsFunc(commands(), func(c command) bool { return c.name == name }) {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", name)
	}
	switch name {
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version":
		fmt.Fprintln(stdout, "Usage:\n  meshfed version\n\nPrint the version of this build (also: meshfed --version).")
		return nil
	}
	// The commands print their help where their flag errors go.
	err := run(ctx, append(slices.Clone(args), "--help"), stdout, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// runVersion prints the build's version.
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		return runHelp(ctx, []string{"version"}, stdout, stderr)
	}
	fmt.Fprintln(stdout, "meshfed", version.String())
	return nil
}
