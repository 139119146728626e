package spoke

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/memlimit"
	"github.com/meshfed/meshfed/internal/version"
)

// Command runs the spoke's command line until ctx ends: `meshfed spoke`
// and `meshfed-spoke` (name is the command as typed). It reports this
// build's version to the hub.
func Command(ctx context.Context, name string, args []string, stderr io.Writer) error {
	cfg := DefaultConfig()
	cfg.Build = version.Version()
	log, err := cli.ParseCommand(name, args, stderr, cfg.AddFlags)
	if err != nil {
		return err
	}
	s, err := New(cfg, log)
	if err != nil {
		return err
	}
	// New has validated them; set them before the spoke allocates.
	memlimit.Set(log, cfg.MemoryLimitRatio)
	memlimit.SetGCPercent(log, cfg.GCPercent)
	return s.Run(ctx)
}
