// Command meshfed-hub is `meshfed hub` alone, with the same flags: the
// binary of the hub's image. It links neither client-go nor the spoke,
// the demo and the load harness, so that the pages package initialization
// touches, which count in a process's resident memory, are the hub's own.
package main

import (
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/cli"
)

var run = cli.Single("meshfed-hub", "hub", hub.Command)

func main() { cli.Main("meshfed-hub", run) }
