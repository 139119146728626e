package federation

import "errors"

var (
	// ErrBadIdentity is returned for a credential that does not name a cluster.
	ErrBadIdentity = errors.New("bad identity")
	// ErrInvalid is wrapped by every validation error.
	ErrInvalid = errors.New("invalid")
	// ErrOverLimit is wrapped by errors for shards over a configured cap.
	ErrOverLimit = errors.New("over limit")
)
