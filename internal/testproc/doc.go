// Package testproc runs a helper process of a test (CoreDNS for dnstest,
// istiod for istiodtest): its output goes to a log file, a failure can
// show the log's tail, and it is stopped in t.Cleanup.
//
// Invariants:
//   - One goroutine per [Start] waits for the process and ends when it
//     exits; t.Cleanup sends SIGTERM, kills the process when it has not
//     exited within the stop timeout, and waits for it either way.
//   - The log file is closed once the process has exited.
package testproc
