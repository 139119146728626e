package main

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/internal/memlimit"
	"github.com/meshfed/meshfed/spoke"
)

func runSpoke(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := spoke.DefaultConfig()
	cfg.Build = build
	var lf logFlags
	fs := newFlagSet("spoke", stderr)
	cfg.AddFlags(fs)
	lf.add(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	s, err := spoke.New(cfg, log)
	if err != nil {
		return err
	}
	// New has validated the ratio; set the limit before the spoke allocates.
	memlimit.Set(log, cfg.MemoryLimitRatio)
	return s.Run(ctx)
}
