package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config is one harness run.
type Config struct {
	// Clusters (C), Services per cluster (S), Endpoints per cluster (E),
	// and Replicas: how many clusters export each service (K).
	Clusters, Services, Endpoints, Replicas int
	// Clients by kind, and Subscriptions: the services each gRPC or Envoy
	// client calls.
	Clients       Mix
	Subscriptions int
	// Rate is the endpoint changes per second, spread over the clusters,
	// for Duration.
	Rate     float64
	Duration time.Duration
	// Servers to measure: "meshfed", "baseline", or both, in that order.
	Servers []string
	// Restart measures the clients' convergence after a hub restart.
	Restart bool
	// Binary is the meshfed executable the hubs run as (`meshfed hub`).
	Binary string
	// Timeout bounds each wait (syncs, convergence, stragglers).
	Timeout time.Duration
	// HubEnv is added to the hub processes' environment (KEY=VALUE), e.g.
	// GOGC or GOMEMLIMIT settings to compare.
	HubEnv []string
	// ProfileDir, when set, receives each hub's heap profile once its
	// clients have synced and its CPU profile over the churn.
	ProfileDir string
}

// DefaultConfig is the full-size run BENCHMARKS.md reports: 100 clusters,
// 100,000 endpoints, 1,000 clients, 200 changes per second.
func DefaultConfig() Config {
	return Config{
		Clusters: 100, Services: 10, Endpoints: 1000, Replicas: 2,
		Clients:       Mix{GRPC: 600, Envoy: 380, Ztunnel: 20},
		Subscriptions: 5,
		Rate:          200,
		Duration:      30 * time.Second,
		Servers:       []string{ServerMeshfed, ServerBaseline},
		Restart:       true,
		Timeout:       2 * time.Minute,
	}
}

// ShortConfig is `make bench`'s: the same shape, about 20× smaller.
func ShortConfig() Config {
	c := DefaultConfig()
	c.Clusters, c.Endpoints = 10, 500
	c.Clients = Mix{GRPC: 60, Envoy: 36, Ztunnel: 4}
	c.Rate, c.Duration = 50, 10*time.Second
	return c
}

// The servers a run can measure.
const (
	ServerMeshfed  = "meshfed"
	ServerBaseline = "baseline"
)

// Validate checks c.
func (c Config) Validate() error {
	if _, err := newWorld(c); err != nil {
		return err
	}
	switch {
	case c.Clients.GRPC < 0 || c.Clients.Envoy < 0 || c.Clients.Ztunnel < 0 || c.Clients.Total() == 0:
		return fmt.Errorf("clients: %+v, want at least one and none negative", c.Clients)
	case c.Rate <= 0:
		return fmt.Errorf("rate: %v changes/s, want more than 0", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("duration: %v, want more than 0", c.Duration)
	case c.Rate*c.Duration.Seconds() >= maxChanges:
		return fmt.Errorf("rate × duration: %.0f changes, want fewer than %d", c.Rate*c.Duration.Seconds(), maxChanges)
	case len(c.Servers) == 0:
		return errors.New("servers: want meshfed, baseline or both")
	case c.Binary == "":
		return errors.New("binary: the meshfed executable is needed to run hubs")
	case c.Timeout <= 0:
		return fmt.Errorf("timeout: %v, want more than 0", c.Timeout)
	}
	for _, kv := range c.HubEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("hub environment: %q is not KEY=VALUE", kv)
		}
	}
	for _, s := range c.Servers {
		if s != ServerMeshfed && s != ServerBaseline {
			return fmt.Errorf("servers: unknown %q, want meshfed or baseline", s)
		}
	}
	return nil
}
