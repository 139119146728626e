// Package spoke wires a spoke: a source of the cluster's objects (a
// directory of manifests today, the Kubernetes API next), the shard
// builder, and the uplink to the hub. The components live in the
// subpackages; this package only builds them from a Config and runs them.
package spoke
