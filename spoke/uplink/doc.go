// Package uplink is the spoke's federation client: the gRPC side of the
// spoke's half of the sync protocol (package syncproto). It keeps one Sync
// stream open to the hub, reconnecting with jittered exponential backoff
// (reset once the hub welcomes a stream), and reports the connection's
// [Status]. What travels on each stream (resume, one update in flight,
// chunking, Nacks, the ack timeout) is the protocol's.
package uplink
