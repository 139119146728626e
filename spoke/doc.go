// Package spoke wires a spoke: a source of the cluster's objects (a
// directory of manifests, or a Kubernetes API server through a kubeconfig
// or the pod's in-cluster config), the shard builder, and the uplink to the
// hub. The components live in the subpackages; this package only builds
// them from a Config and runs them.
package spoke
