// Command meshfed is the meshfed hub, spoke and tools in one binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/version"
)

const usage = `meshfed federates service meshes across Kubernetes clusters.

Usage:
  meshfed hub     [flags]   run the hub: spokes connect to it
  meshfed spoke   [flags]   run a spoke: federate one cluster to the hub
  meshfed status  [flags]   show the clusters a hub knows
  meshfed demo    [flags]   run a hub and two spokes (east, west) on loopback
  meshfed demo client       call the demo's echo through the hub's xDS, printing who answers
  meshfed certs   [flags]   mint a throwaway CA and hub/cluster certificates
  meshfed bench   [flags]   run the load harness: simulated spokes, xDS clients and churn against a hub and a baseline
  meshfed version           print the version

Run 'meshfed <command> -h' for a command's flags.
`

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
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "certs":
		return runCerts(args, stdout, stderr)
	case "bench":
		return runBench(ctx, args, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "meshfed", version.String())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
