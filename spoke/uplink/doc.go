// Package uplink is the spoke's federation client: the gRPC side of the
// spoke's half of the sync protocol (package syncproto). It keeps one Sync
// stream open to the hub and reports the connection's [Status].
//
// When a stream that worked ends (the hub restarted or dropped it), the
// spoke reconnects at once, after a random wait under
// [Config.ReconnectJitter] that keeps a fleet from arriving in the same
// millisecond. Only failures back off, with full jitter, doubling: dials
// that fail, streams the hub never welcomed, and streams it dropped soon
// after its Welcome (a hub that welcomes and drops would otherwise be
// reconnected to in a loop). A healthy stream resets the backoff. What
// travels on each stream (resume, one update in flight, chunking, Nacks,
// the ack timeout) is the protocol's.
package uplink
