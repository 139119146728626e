// Package ingest is the hub's federation server: it authenticates each
// spoke's Sync stream, binds it to the cluster named by the spoke's
// credential, reassembles chunked updates, and applies them to the
// registry, answering each version with an Ack or a Nack.
//
// The protocol logic runs over the small [Stream] interface, so tests can
// drive it without gRPC; gRPC is only the adapter in [Server.Sync].
package ingest
