// Package syncproto is the sync protocol of federationpb's Sync stream,
// both ends of it, over a transport that only sends and receives
// messages: [Spoke] runs the spoke's sessions (Hello, resume, one update
// in flight, Nack backoff, timeouts), [Hub] the hub's (authenticated
// Hello, Welcome, chunk reassembly within the hub's bounds, Ack or Nack).
// gRPC is one transport (spoke/uplink and hub/ingest are its adapters);
// tests use in-memory ones. The package declares what it needs of the
// spoke's shard ([Shard], [Update]) and of the hub's registry ([Conn]),
// reports what happens through [SpokeObserver] and [HubObserver], and
// reads time only from an injected clock.
//
// Invariants:
//   - A session has one receiver, a goroutine calling Recv; every decision
//     is taken on the session's goroutine. A spoke's session returns after
//     its receiver. A hub's session may return first: a gRPC server
//     stream's Recv returns only once the handler has returned, and the
//     receiver ends then, without blocking.
//   - One update is in flight at a time, and the hub answers each complete
//     update with one Ack or one Nack, or ends the stream.
//   - The hub applies an update only when its last chunk has arrived, whole
//     or not at all.
//   - The wire is that of federationpb, message for message.
//
// The protocol assumes what a gRPC stream gives: messages arrive in order,
// each once, and a lost message ends the stream. What it does when a
// stream or a peer does otherwise:
//
//   - The stream breaks (in either direction, at any point): the spoke
//     reconnects (at once after a stream that worked, after a jittered
//     backoff after failures) and says in Hello what the hub
//     acknowledged and what it sent. The hub resumes when it holds a
//     version between the two, and the spoke sends everything changed
//     since (the update in flight again, unless the hub had applied it);
//     otherwise the spoke sends its full state.
//   - The hub goes silent: no Welcome (a lost Hello or Welcome), no
//     answer to an update (a lost chunk at the end, a lost Ack or Nack, a
//     stalled hub), or it stops reading so that Send blocks. The spoke's
//     welcome timeout, or its ack timeout (time without progress on the
//     update in flight), ends the stream, which then breaks as above. A
//     silent spoke is idle: the hub waits.
//   - A message arrives twice. A second Hello or Welcome is ignored. A
//     chunk that comes twice before its update's last chunk ends the
//     stream (no object is in two chunks of an update). A repeated last
//     chunk, or a repeated one-chunk update, comes after its version was
//     taken: the hub rejects it, and the spoke ignores the Nack, as it
//     ignores every answer to a version not in flight.
//   - Messages are reordered. Chunks of one update may come in any order
//     before its last one. A chunk of another version before an update's
//     last chunk ends the stream. A chunk after its update's last chunk
//     shows that the hub took the update without it, and ends the stream;
//     when the hub had applied it, it also does not resume that session
//     until a full update has replaced the shard, so the spoke sends its
//     full state. Anything before Hello ends the stream.
//   - A chunk other than the last is lost while the stream goes on, or
//     moves past the next update: the wire carries no chunk count, so the
//     hub cannot tell the update is incomplete. No stream does this.
//   - A newer stream of the same cluster supersedes an older one, whose
//     session ends; only the newest writes the shard.
//   - The hub rejects an update (Nack): it keeps its last good shard. The
//     spoke's next update is its full state: at once after NO_BASE, and
//     otherwise after a backoff (doubling with each Nack, reset by an Ack)
//     and a change, so that a shard the hub cannot take is not resent in a
//     loop.
package syncproto
