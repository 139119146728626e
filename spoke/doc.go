// Package spoke wires a spoke, reflectors → tables → reconcilers:
//
//   - a source of the cluster's objects, which only reads: a directory of
//     manifests (spoke/source/file), or a Kubernetes API server through a
//     kubeconfig or the pod's in-cluster config (spoke/source/kube, over
//     the REST clients of spoke/kubeclient);
//   - the shard builder and tracker (spoke/shard), which normalize
//     (spoke/normalize) what changed and keep what the hub has not
//     acknowledged;
//   - one uplink per hub replica (spoke/uplink), and the imports each
//     replica sends (spoke/imports);
//   - for a Kubernetes source, the write-back (spoke/writeback): Events of
//     rejected objects, ServiceExport conditions and the clusterset's
//     imports, written into the cluster;
//   - optionally, an MCP server that feeds the cluster's istiod the
//     clusterset's services (spoke/mcp), and leader election among the
//     spokes of one cluster (spoke/leader), under which only the leader
//     streams to the hubs and writes into the cluster.
//
// The components live in the subpackages; this package only builds them
// from a Config and runs them.
package spoke
