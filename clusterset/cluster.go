package clusterset

import (
	"fmt"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// ClusterState is where a cluster is in its lease: what the clusterset
// still serves of it once its spoke has gone.
type ClusterState uint8

const (
	// Live means the spoke's stream is up, or went down less than the stale
	// grace ago. Its endpoints are served at their locality's priority.
	Live ClusterState = iota
	// Stale means the spoke has been gone longer than the stale grace. Its
	// endpoints are still served, but after every live cluster's (Envoy and
	// gRPC fail over to them only when nothing live is left).
	Stale
	// Withdrawn means the spoke has been gone longer than the withdrawal grace.
	// Nothing of the cluster is served any more.
	Withdrawn
)

// ClusterStates lists every state, in lease order.
var ClusterStates = []ClusterState{Live, Stale, Withdrawn}

func (s ClusterState) String() string {
	switch s {
	case Live:
		return "live"
	case Stale:
		return "stale"
	case Withdrawn:
		return "withdrawn"
	default:
		return "unknown"
	}
}

// MarshalText writes the state's name, for JSON and logs.
func (s ClusterState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *ClusterState) UnmarshalText(b []byte) error {
	for _, st := range ClusterStates {
		if st.String() == string(b) {
			*s = st
			return nil
		}
	}
	return fmt.Errorf("unknown cluster state %q", b)
}

// ClusterInfo is what the clusterset knows of one cluster. Withdrawn
// clusters are not part of the clusterset.
type ClusterInfo struct {
	ID          federation.ClusterID
	Network     federation.NetworkID
	TrustDomain string
	Gateways    []*federationpb.Gateway
	State       ClusterState
}

// Changes lists what a snapshot changed relative to its predecessor, so
// that consumers can do incremental work.
type Changes struct {
	// Services are the keys (namespace/name) of added, changed or removed services.
	Services []string
	// Workloads are the keys (cluster/uid) of added, changed or removed workloads.
	Workloads []string
	// Clusters is true when some ClusterInfo changed.
	Clusters bool
	// Observed is when a spoke observed the oldest change in its cluster
	// that this revision carries, in the hub's clock; zero for revisions
	// no spoke's change made (a lease running out, a policy reload).
	Observed time.Time
}

// Fold adds the changes of a later revision to c, for a reader that
// skips revisions.
func (c *Changes) Fold(later Changes) {
	c.Services = append(c.Services, later.Services...)
	c.Workloads = append(c.Workloads, later.Workloads...)
	c.Clusters = c.Clusters || later.Clusters
	if !later.Observed.IsZero() && (c.Observed.IsZero() || later.Observed.Before(c.Observed)) {
		c.Observed = later.Observed
	}
}
