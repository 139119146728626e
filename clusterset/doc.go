// Package clusterset is the merged clusterset as the hub reads it: every
// cluster's exported services merged by namespace sameness (MCS, with its
// conflict rules), their endpoints and the workloads behind them tagged
// with their cluster and network, the member clusters with their leases and
// east-west gateways, and the hub's decisions on each MCS import.
//
// Every reader (xDS translation, the workload API, the spokes' imports,
// the debug pages and the UI) reads one [Snapshot] interface, and the rule
// for reaching an endpoint on another network (which gateways lead there,
// which endpoints they stand for, their weight and locality) is stated
// once, in reach.go. The hub's registry is the only writer: it publishes a
// new immutable snapshot for every accepted change.
//
// Invariants:
//   - Nothing here is modified once published: snapshots, services,
//     endpoints, workloads and gateways are shared between snapshots, and
//     readers read them without locks.
//   - Merging is a pure function of the clusters' exports (MergeService);
//     the same exports give the same service at every hub replica.
//   - The hub's compact endpoints and workloads answer the getters of the
//     messages they were made from, so readers read either alike.
//
// It does no I/O. Package federation, below it, is the spoke↔hub contract
// the shards arrive in.
package clusterset
