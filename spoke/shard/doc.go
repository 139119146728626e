// Package shard holds a spoke's shard and turns changes to it into the
// federation protocol's updates.
//
// The [Builder] is the single writer: sources hand it their objects and
// the changes since the last call, and it renormalizes only what those
// changes touch. The [Tracker] remembers a hash of each object of the
// current shard and the encodings of those changed since the hub last
// acknowledged them, so the uplink can send a delta or resume after a
// reconnect; when the hub needs the whole shard again, the tracker has the
// builder write it anew from the source's caches.
package shard
