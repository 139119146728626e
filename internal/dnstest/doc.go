// Package dnstest runs a real CoreDNS for tests: the stock binary, whose
// kubernetes plugin reads a [kubetest.Cluster]'s API server and answers
// cluster.local and, as an MCS implementation's DNS does, clusterset.local
// names from ServiceImports and their EndpointSlices (Corefile).
//
// The binary is built from the Go module proxy by `make test-assets`
// (hack/testassets/coredns) next to kube-apiserver and etcd, in the folder
// KUBEBUILDER_ASSETS names. Without it [Start] fails the test and says so:
// these tests never skip.
//
// Invariants:
//   - One CoreDNS process per [Start], on loopback UDP and TCP ports of its
//     own, stopped in t.Cleanup.
//   - [Start] returns once CoreDNS has synced its caches with the API server
//     and answers queries; a change written after that reaches CoreDNS
//     through its informers a little later, so tests wait for an answer
//     ([Server.WaitFor]) rather than asking once.
package dnstest
