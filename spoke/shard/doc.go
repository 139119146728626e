// Package shard holds a spoke's shard and turns changes to it into the
// federation protocol's updates.
//
// The [Builder] is the single writer: sources hand it their objects and
// the changes since the last call, and it renormalizes only what those
// changes touch. The [Tracker] remembers a hash of each object of the
// current shard and the encodings of those changed since the hub last
// acknowledged them, so the uplink can send a delta or resume after a
// reconnect.
//
// Data flows one way: source → builder → tracker → uplink. When the hub
// needs the whole shard again, the tracker does not call back into the
// builder: it signals [Tracker.Resync], and the builder's [Builder.Run]
// writes the shard anew from the source's caches through the same
// [Tracker.Update] that carries every change.
package shard
