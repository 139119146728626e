// Package xds serves the clusterset to Envoy sidecars, proxyless gRPC
// clients and ztunnels over ADS, with a handler of its own for each kind
// of stream (state of the world, delta), each keeping its streams' state
// (what the proxy holds, and for a wildcard delta subscription the
// revision of the set it matches), both over a cache of its own. The
// messages are package adspb's, wire-compatible with Envoy's: the hub
// links none of go-control-plane's generated types, whose descriptors
// would cost it megabytes of binary and heap.
//
// The [Server] is an adapter around package translate's deterministic
// translator: it owns the gRPC listener, debounces the registry's
// snapshots into pushes (with an injected clock), hands each push's
// snapshot and the views proxies use to the translator, and applies the
// set updates it returns to the [Cache], which answers the proxies'
// watches. A small book of connected proxies, built over the cache, maps
// each request to its view, tells the push loop when a view comes into
// use or goes out of it, and times the ACKs of changes; /debug/proxies,
// /debug/xds and /debug/explain are views over the book, the cache and
// the snapshot last pushed.
//
// The port is guarded before any of that: new streams are rate-limited per
// source address, and when the TLS configuration requires client
// certificates each stream's SPIFFE identity is recorded and, with the
// claims of the node on its first request, put to an [Authorizer] (by
// default: the identity is in one of the clusterset's trust domains, and
// in that of the cluster the node claims).
//
// Invariants:
//   - Responses reference shared, already encoded resources; nothing is
//     encoded per proxy.
//   - Each watch gets at most one response and the cache never blocks on a
//     proxy: a slow proxy's updates coalesce until it asks again.
//   - One goroutine (the push loop) owns the translator and writes the
//     cache; watches read the cache under its lock.
//   - Calls go one way: streams call the book and the cache, the book
//     calls the cache; the cache calls neither. A stream's goroutine is
//     the only writer of its subscriptions: the cache reads one while its
//     watch is open, and its answer says what the proxy holds once it has
//     it. The book shares the stream's subscribed names (replaced, never
//     modified) rather than a copy.
//   - No proxy is answered before the first snapshot (the warm one) is
//     pushed.
//   - Where client certificates are required, no proxy is answered, nor
//     enters the book, before its identity is authorized for its node's
//     claims.
package xds
