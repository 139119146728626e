package kube

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/spoke/imports"
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
	// Imports, when set, has the source write the clusterset's imports
	// into the cluster (MCS ServiceImports and EndpointSlices) and the
	// ServiceExports' Conflict and Ready conditions, and report what the
	// cluster holds.
	Imports *imports.Store
	// ImportWorkers write that many imports at once (0:
	// importwriter.DefaultWorkers).
	ImportWorkers int
	// ImportQPS and ImportBurst bound the import writes with a rate
	// limiter of their own (NewForConfig; 0: DefaultImportQPS and twice
	// it). The cluster's reads, the ServiceExport status and the Events
	// keep the rest config's.
	ImportQPS   float64
	ImportBurst int
	// DiscoveryInterval is how often the source asks whether the cluster
	// serves the MCS kinds it did not serve yet (default
	// [DefaultDiscoveryInterval]).
	DiscoveryInterval time.Duration
	// Metrics, when set, registers the import writer's metrics.
	Metrics prometheus.Registerer
}

// DefaultDiscoveryInterval is how often a source asks again whether the
// cluster serves the MCS kinds: a CRD installed later is picked up within
// it, for one small GET per version.
const DefaultDiscoveryInterval = 30 * time.Second

// DefaultImportQPS bounds the import writes (see BENCHMARKS.md).
const DefaultImportQPS = 500

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.BatchWindow == 0 {
		c.BatchWindow = DefaultBatchWindow
	}
	if c.DiscoveryInterval == 0 {
		c.DiscoveryInterval = DefaultDiscoveryInterval
	}
	if c.ImportQPS == 0 {
		c.ImportQPS = DefaultImportQPS
	}
	if c.ImportBurst == 0 {
		c.ImportBurst = max(1, int(2*c.ImportQPS))
	}
	c.Options = c.Options.WithDefaults()
	return c
}

// Validate reports the problems in c.
func (c Config) Validate() error {
	if c.BatchWindow < 0 || c.BatchWindow > maxBatchWindow {
		return fmt.Errorf("%w: batch window %v: want 0 (default %v) to %v", ErrInvalidConfig, c.BatchWindow, DefaultBatchWindow, maxBatchWindow)
	}
	if c.DiscoveryInterval < 0 || c.ImportQPS < 0 || c.ImportBurst < 0 || c.ImportWorkers < 0 {
		return fmt.Errorf("%w: discovery interval %v, import QPS %v, burst %d, workers %d: none may be negative",
			ErrInvalidConfig, c.DiscoveryInterval, c.ImportQPS, c.ImportBurst, c.ImportWorkers)
	}
	return nil
}
