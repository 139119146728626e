// Package e2e holds the tests that run the hub and spokes together: the
// sync protocol over an in-memory gRPC transport with injected faults,
// multi-cluster scenarios over loopback mTLS, and the fault matrix on real
// meshfed processes (docs/faults.md lists what each fault test proves).
package e2e
