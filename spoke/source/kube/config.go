package kube

import (
	"fmt"
	"time"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// Batching bounds. A window longer than maxBatchWindow would add more
// latency to a burst than a rollout's coalescing is worth.
const (
	DefaultBatchWindow = 10 * time.Millisecond
	maxBatchWindow     = 100 * time.Millisecond
)

// Config configures a [Source]. There is no resync period: the watches
// deliver every change, and a resync would only redeliver objects the
// source already has, which it filters out.
type Config struct {
	// Options are the spoke's normalization options, the shard builder's:
	// the ServiceExport Valid condition is decided with them, so that it
	// says what the builder does.
	Options normalize.Options
	// BatchWindow: a change after a quiet period is delivered at once;
	// later ones wait until BatchWindow has passed since the previous
	// delivery began, and leave together. Default [DefaultBatchWindow], at
	// most 100ms.
	BatchWindow time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.BatchWindow == 0 {
		c.BatchWindow = DefaultBatchWindow
	}
	c.Options = c.Options.WithDefaults()
	return c
}

// Validate reports the problems in c.
func (c Config) Validate() error {
	if c.BatchWindow < 0 || c.BatchWindow > maxBatchWindow {
		return fmt.Errorf("%w: batch window %v: want 0 (default %v) to %v", ErrInvalidConfig, c.BatchWindow, DefaultBatchWindow, maxBatchWindow)
	}
	return nil
}
