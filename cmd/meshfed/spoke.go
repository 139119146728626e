package main

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/internal/version"
	"github.com/meshfed/meshfed/spoke"
)

func runSpoke(ctx context.Context, args []string, stderr io.Writer) error {
	return spoke.Command(ctx, "meshfed spoke", args, stderr, version.Version())
}
