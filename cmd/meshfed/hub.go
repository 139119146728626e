package main

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/hub"
)

func runHub(ctx context.Context, args []string, stderr io.Writer) error {
	return hub.Command(ctx, "meshfed hub", args, stderr)
}
