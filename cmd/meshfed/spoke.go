package main

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/spoke"
)

func runSpoke(ctx context.Context, args []string, stderr io.Writer) error {
	return spoke.Command(ctx, "meshfed spoke", args, stderr)
}
