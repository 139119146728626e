// Package hub wires the hub's components: the federation ingest server, the
// registry, and the debug HTTP server. The components live in the
// subpackages; this package only builds them from a Config and runs them.
package hub
