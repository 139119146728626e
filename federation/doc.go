// Package federation is the contract between spokes and the hub: the shard
// model and sync protocol (package federationpb, the state machines in
// syncproto), object keys, cluster identities, validation of everything a
// spoke sends, and how a spoke reads the imports the hub sends it.
//
// It does no I/O and imports no servers, so both sides and every test can
// use it. What the hub makes of the shards, the merged clusterset, is
// package clusterset, above it.
package federation
