// Package bench is meshfed's load harness (`meshfed bench`): simulated
// spokes (the real shard tracker and uplink, without Kubernetes), xDS
// clients that subscribe as proxyless gRPC, Envoy and ztunnel do, and
// endpoint churn, against a hub run as its own process, and the same
// against a baseline (go-control-plane's SnapshotCache with a snapshot per
// node). It measures propagation latency per (change, client) pair, the
// hub's CPU, heap and RSS, bytes on the wire, and convergence after a hub
// restart.
package bench
