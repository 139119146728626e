// Command meshfed-spoke is `meshfed spoke` alone, with the same flags: the
// binary to ship to every cluster. Without the hub, xDS and the tools it is
// 34 MB instead of 60, and an idle spoke's resident memory 21 MB instead of
// 37 (BENCHMARKS.md): a process's RSS counts the pages of its binary that
// package initialization touches, and the hub's are never needed here.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/version"
	"github.com/meshfed/meshfed/spoke"
)

func main() { cli.Main("meshfed-spoke", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "spoke" {
		// `meshfed-spoke spoke --flags` is `meshfed spoke --flags`: an image
		// may have either binary as its entrypoint under the same chart.
		args = args[1:]
	}
	if len(args) == 1 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, "meshfed-spoke", version.String())
		return nil
	}
	return spoke.Command(ctx, "meshfed-spoke", args, stderr, version.Version())
}
