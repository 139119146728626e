package xds

import "github.com/meshfed/meshfed/federation"

// Snapshot is the read-only clusterset view the xDS server serves. The
// hub's registry snapshots satisfy it through a small adapter, so that xds
// never imports the hub.
type Snapshot interface {
	Revision() uint64
	// Services returns every clusterset service, sorted by key.
	Services() []*federation.ServiceView
	Service(key string) (*federation.ServiceView, bool)
	// Clusters returns every known cluster (with its gateways), sorted by ID.
	Clusters() []*federation.ClusterInfo
	// Workload returns a workload by its key (cluster/uid); Workloads lists
	// them all, sorted.
	Workload(key string) (federation.TaggedWorkload, bool)
	Workloads() []federation.TaggedWorkload
	// Changes says what changed since the previous revision.
	Changes() federation.Changes
	// Done is closed when a newer snapshot exists; Next returns it then.
	Done() <-chan struct{}
	Next() Snapshot
}
