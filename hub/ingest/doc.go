// Package ingest is the hub's federation server: the gRPC adapter of the
// hub's side of the sync protocol (package syncproto). It authenticates
// each spoke's Sync stream from its gRPC peer, hands the stream to the
// protocol with the cluster the credential binds, writes the spoke's
// updates to the registry through the stream's registry.Conn, maps the
// reasons a session ends to gRPC status codes, and records metrics and
// logs of what the protocol reports.
package ingest
