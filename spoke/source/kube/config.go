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
	// Options are the spoke's normalization options, the shard builder's.
	Options normalize.Options
	// BatchWindow: a change after a quiet period is delivered at once;
	// later ones wait until BatchWindow has passed since the previous
	// delivery began, and leave together. Default [DefaultBatchWindow], at
	// most 100ms.
	BatchWindow time.Duration
	// DiscoveryInterval is how often the source asks whether the cluster
	// serves the MCS kinds it did not serve yet (default
	// [DefaultDiscoveryInterval]).
	DiscoveryInterval time.Duration
	// DiscoverImports keeps asking until the cluster serves ServiceImports
	// too, for a spoke that writes them ([Source.MCS] says when).
	DiscoverImports bool
}

// DefaultDiscoveryInterval is how often a source asks again whether the
// cluster serves the MCS kinds: a CRD installed later is picked up within
// it, for one small GET per version.
const DefaultDiscoveryInterval = 30 * time.Second

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.BatchWindow == 0 {
		c.BatchWindow = DefaultBatchWindow
	}
	if c.DiscoveryInterval == 0 {
		c.DiscoveryInterval = DefaultDiscoveryInterval
	}
	c.Options = c.Options.WithDefaults()
	return c
}

// Validate reports the problems in c.
func (c Config) Validate() error {
	if c.BatchWindow < 0 || c.BatchWindow > maxBatchWindow {
		return fmt.Errorf("%w: batch window %v: want 0 (default %v) to %v", ErrInvalidConfig, c.BatchWindow, DefaultBatchWindow, maxBatchWindow)
	}
	if c.DiscoveryInterval < 0 {
		return fmt.Errorf("%w: discovery interval %v is negative", ErrInvalidConfig, c.DiscoveryInterval)
	}
	return nil
}
