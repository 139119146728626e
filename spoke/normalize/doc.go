// Package normalize turns a cluster's Kubernetes objects into the federation
// shard model. Its functions are pure: they read an [Inputs] view and
// return new federation objects, so the file source and the kube source
// share them.
package normalize
