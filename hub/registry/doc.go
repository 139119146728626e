// Package registry is the hub's shard store and aggregate registry.
//
// Each cluster's shard is kept as its spoke sent it. Every accepted change
// publishes a new immutable [clusterset.Snapshot] of the clusterset:
// services merged by namespace sameness, endpoints and workloads tagged
// with their cluster and network, and the registry's decisions on each MCS
// import. Readers take the current snapshot without locks and wait for the
// next one on its Done channel. The registry is the clusterset's only
// writer.
//
// Invariants:
//   - A snapshot is never modified after it is published; snapshots share
//     unchanged objects with their predecessors.
//   - Only the stream that holds a cluster's [Conn] writes that cluster's
//     shard; a newer stream for the same cluster supersedes the older one.
//   - An update is applied whole or not at all: a rejected update leaves the
//     last good shard, and the published snapshot, untouched.
//   - A full update is diffed against the shard it replaces, so unchanged
//     objects are not republished (no remove-then-add).
package registry
