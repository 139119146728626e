package main

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/memlimit"
)

func runHub(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := hub.DefaultConfig()
	log, err := cli.ParseCommand("meshfed hub", args, stderr, cfg.AddFlags)
	if err != nil {
		return err
	}
	h, err := hub.New(cfg, log)
	if err != nil {
		return err
	}
	// New has validated the ratio; set the limit before the hub allocates.
	memlimit.Set(log, cfg.MemoryLimitRatio)
	return h.Run(ctx)
}
