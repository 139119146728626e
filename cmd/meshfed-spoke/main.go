// Command meshfed-spoke is `meshfed spoke` alone, with the same flags: the
// binary to ship to every cluster. Without the hub, xDS and the tools it is
// 34 MB instead of 60, and an idle spoke's resident memory 21 MB instead of
// 37 (BENCHMARKS.md): a process's RSS counts the pages of its binary that
// package initialization touches, and the hub's are never needed here.
package main

import (
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/spoke"
)

var run = cli.Single("meshfed-spoke", "spoke", spoke.Command)

func main() { cli.Main("meshfed-spoke", run) }
