// Command meshfed-spoke is `meshfed spoke` alone, with the same flags: the
// binary to ship to every cluster. Without the hub, xDS and the tools it
// is much smaller, and so is an idle spoke's resident memory
// (BENCHMARKS.md has the figures): a process's RSS counts the pages of its
// binary that package initialization touches, and the hub's are never
// needed here.
package main

import (
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/spoke"
)

var run = cli.Single("meshfed-spoke", "spoke", spoke.Command)

func main() { cli.Main("meshfed-spoke", run) }
