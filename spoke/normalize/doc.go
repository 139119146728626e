// Package normalize turns a cluster's Kubernetes objects into the federation
// shard model. Its functions are pure: they read an [Inputs] view and
// return new federation objects, so the file source and the kube source
// share them.
//
// Every function applies [Options.WithDefaults] itself and returns sorted,
// deterministic results, so that shards built twice from the same objects
// are equal and deltas stay small. Nothing returned aliases the inputs.
//
// What they return passes the federation's validation and can be encoded,
// or is not returned: an object that cannot be federated as it is (a port
// out of range, an address that is not one, a string that is not UTF-8,
// a slice larger than an API server allows) is rejected as a whole with a
// [Rejection] naming the object, field and value, never trimmed to what
// is usable. What to do instead (keep its last good version) is the
// caller's choice.
package normalize
