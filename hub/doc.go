// Package hub wires the hub's components and runs them:
//
//   - hub/ingest, the federation server: one stream per cluster, the
//     spoke's certificate naming the cluster it may publish;
//   - hub/registry, every cluster's shard and the merged clusterset it
//     publishes (clusterset.Snapshot), with the cluster policy of
//     hub/policy checked on every update and the MCS ClusterSetIPs of
//     hub/clustersetip;
//   - xds, the proxies' server (xDS and the workload API), which reads the
//     registry's snapshots;
//   - hub/imports, each importing spoke's feed of what its cluster should
//     hold;
//   - hub/debug and hub/ui, the operator endpoints and the web view.
//
// It also decides when the registry is warm enough to serve (warmup.go):
// neither proxies nor importing spokes are answered before every member of
// the clusterset has sent its shard, so that a restarted hub never serves
// a partial clusterset. The components live in the subpackages; this
// package only builds them from a Config and runs them.
package hub
