package federation

import "errors"

var (
	// ErrBadIdentity is returned for a credential that does not name a cluster.
	ErrBadIdentity = errors.New("bad identity")
	// ErrInvalid is wrapped by every validation error.
	ErrInvalid = errors.New("invalid")
	// ErrOverLimit is wrapped by errors for shards over a configured cap.
	ErrOverLimit = errors.New("over limit")
	// ErrNotAllowed is wrapped by errors for objects the hub's cluster
	// policy does not allow the cluster to publish.
	ErrNotAllowed = errors.New("not allowed by the cluster policy")
)
