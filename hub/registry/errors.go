package registry

import "errors"

var (
	// ErrSuperseded is returned to a stream that a newer stream of the same
	// cluster replaced.
	ErrSuperseded = errors.New("superseded by a newer stream for the same cluster")
	// ErrNoBase is returned for a delta that has no base shard of the same
	// session at the hub; the spoke must send its full state.
	ErrNoBase = errors.New("delta without a base shard of this session")
	// ErrStaleVersion is returned for an update whose version is not greater
	// than the shard's.
	ErrStaleVersion = errors.New("version is not greater than the shard's")
	// ErrHeld is returned to a spoke that another spoke displaced and
	// that tries to take the cluster back while that one streams: two
	// spokes run for one cluster.
	ErrHeld = errors.New("another spoke streams for this cluster")
)
