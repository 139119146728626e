// Package normalize turns a cluster's Kubernetes objects into the federation
// shard model. Its functions are pure: they read an [Inputs] view and
// return new federation objects, so the file source and the kube source
// share them.
//
// Every function applies [Options.WithDefaults] itself and returns sorted,
// deterministic results, so that shards built twice from the same objects
// are equal and deltas stay small. Nothing returned aliases the inputs.
package normalize
