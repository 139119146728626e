// Package e2e holds the tests that run the hub and spokes together: the
// sync protocol over an in-memory gRPC transport with injected faults,
// multi-cluster scenarios over loopback mTLS and real API servers, the
// fault matrix on real meshfed processes (docs/faults.md lists what each
// fault test proves), and the comparisons with a real istiod.
//
// Each test file is of one kind, a build tag that selects it alone:
// e2e_memory (the hub and the spokes in the test's process), e2e_process
// (meshfed as separate processes), e2e_istiod (against a real istiod).
// Without a tag every kind runs; `make test-e2e-memory`,
// `test-e2e-process` and `test-istiod` run one. The web view's test in a
// real browser is a module of its own, e2e/browser (make
// test-e2e-browser), so that its browser driver stays out of this
// module's graph.
package e2e
