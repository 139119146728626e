// Package reference builds, as go-control-plane messages, the resources
// that package resources encodes directly: CDS clusters, LDS listeners,
// RDS route configurations and EDS load assignments, as a user of
// go-control-plane writes them. It is the reference the encodings are
// checked against (byte for byte, against proto's deterministic
// marshalling), and what the load harness's go-control-plane baseline
// serves.
//
// The hub does not import it: linking go-control-plane's generated types
// would cost a hub megabytes of binary and of heap for their descriptors.
package reference
