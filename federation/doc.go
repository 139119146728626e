// Package federation is the contract between spokes and the hub: the shard
// model and sync protocol (package federationpb), object keys, cluster
// identities, validation of everything a spoke sends, and the pure merge of
// per-cluster services into clusterset services.
//
// It does no I/O and imports no servers, so both sides and every test can
// use it.
package federation
