// Package kubetest runs real Kubernetes API servers for tests: one
// kube-apiserver and etcd per simulated cluster, through controller-runtime's
// envtest, with the MCS CRDs (ServiceExport, ServiceImport) installed.
//
// The binaries are built from the Go module proxy by `make test-assets`
// (hack/testassets) and found through KUBEBUILDER_ASSETS, which `make test`
// and `make test-e2e` set. Without them [Start] fails the test and says so:
// real-API tests never skip.
//
// Invariants:
//   - Clusters share nothing: each has its own etcd, API server, ports,
//     certificates and temporary directory, and is stopped in t.Cleanup.
//   - There are no kubelets and no controllers: Pods never run, and nothing
//     writes EndpointSlices or status but the test itself.
//   - [Cluster.Restart] (and [Cluster.StopAPIServer], [Cluster.StartAPIServer])
//     keep the address, the serving and client certificates and etcd's data,
//     so the Config, the clients and the kubeconfig file stay valid across it.
//
// controller-runtime prints a notice with a stack trace when its logger is
// used more than 30 s after the test binary started and log.SetLogger was
// never called; a package whose tests run that long may call
// log.SetLogger (sigs.k8s.io/controller-runtime/pkg/log) in its TestMain.
package kubetest
