// Package debughttp is what the hub's and the spoke's debug ports share:
// Go's profiles under /debug/pprof/ ([RegisterPprof]) and a guard that
// keeps the port read-only and out of reach of web pages ([Harden]).
//
// The debug port is plain HTTP without authentication. Its views show the
// whole clusterset (on the hub) and its profiles show what the process
// holds, so it is meant to listen on loopback, or on a pod IP where only
// probes and scrapers reach it. Invariants:
//
//   - Only GET and HEAD reach the wrapped handler: every page is a view,
//     and nothing on the port changes state.
//   - A request that arrived over loopback (the listener is loopback, or
//     a wildcard listener was reached through 127.0.0.1 or ::1) names
//     localhost, an IP address or a configured name in its Host header.
//     A browser puts the page's host name there, so a DNS-rebinding page
//     (evil.example resolved to 127.0.0.1) is refused, while local tools,
//     kubectl port-forward and kubelet probes are not.
//   - /debug/pprof/cmdline, which shows the command line and with it the
//     paths of keys and certificates, is served only when asked for.
package debughttp
