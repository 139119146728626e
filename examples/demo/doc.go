// Package demo holds the Kubernetes manifests of meshfed's two-cluster demo
// and the facts about them that the demo's runner needs.
//
// [Manifests] has one directory per cluster, east/ and west/, of plain
// Kubernetes YAML (Namespaces, Nodes, Services, EndpointSlices, Pods and
// MCS ServiceExports) that a spoke reads with `meshfed spoke --manifests DIR`
// in place of a kube-apiserver. The comment atop each file says what to edit
// while the demo runs to watch the hub follow.
//
// Invariant (checked by the tests): the echo EndpointSlices list exactly
// [EchoBackends] on port [EchoPort], so the echo servers the demo starts are
// the endpoints the hub learns about.
package demo
