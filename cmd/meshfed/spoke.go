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
	log, err := parseCommand("spoke", args, stderr, cfg.AddFlags)
	if err != nil {
		return err
	}
	s, err := spoke.New(cfg, log)
	if err != nil {
		return err
	}
	// New has validated them; set them before the spoke allocates.
	memlimit.Set(log, cfg.MemoryLimitRatio)
	memlimit.SetGCPercent(log, cfg.GCPercent)
	return s.Run(ctx)
}
