// Package e2e holds the tests that run the hub and spokes together: the
// sync protocol over an in-memory gRPC transport with injected faults, and
// multi-cluster scenarios over loopback mTLS.
package e2e
