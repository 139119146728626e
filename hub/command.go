package hub

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/memlimit"
)

// Command runs the hub's command line until ctx ends: `meshfed hub` and
// `meshfed-hub` (name is the command as typed).
func Command(ctx context.Context, name string, args []string, stderr io.Writer) error {
	cfg := DefaultConfig()
	log, err := cli.ParseCommand(name, args, stderr, cfg.AddFlags)
	if err != nil {
		return err
	}
	h, err := New(cfg, log)
	if err != nil {
		return err
	}
	// New has validated the ratio; set the limit before the hub allocates.
	memlimit.Set(log, cfg.MemoryLimitRatio)
	return h.Run(ctx)
}
