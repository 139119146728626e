package federation

import "github.com/meshfed/meshfed/federation/federationpb"

// ClusterInfo is what the clusterset knows of one cluster.
type ClusterInfo struct {
	ID          ClusterID
	Network     NetworkID
	TrustDomain string
	Gateways    []*federationpb.Gateway
	Connected   bool
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
}
