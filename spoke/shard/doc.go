// Package shard holds a spoke's shard and turns changes to it into the
// federation protocol's updates.
//
// The [Builder] is the single writer: sources hand it their objects and
// the changes since the last call, and it renormalizes only what those
// changes touch. The [Tracker] remembers the current shard and which keys
// changed since the hub last acknowledged them, so the uplink can send a
// delta, resume after a reconnect, or fall back to the full state.
package shard
