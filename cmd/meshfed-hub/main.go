// Command meshfed-hub is `meshfed hub` alone, with the same flags: the
// binary of the hub's image. It links neither client-go nor the spoke,
// the demo and the load harness, so that the pages package initialization
// touches, which count in a process's resident memory, are the hub's own.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/version"
)

func main() { cli.Main("meshfed-hub", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "hub" {
		// `meshfed-hub hub --flags` is `meshfed hub --flags`: an image may
		// have either binary as its entrypoint under the same chart.
		args = args[1:]
	}
	if len(args) == 1 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, "meshfed-hub", version.String())
		return nil
	}
	return hub.Command(ctx, "meshfed-hub", args, stderr)
}
