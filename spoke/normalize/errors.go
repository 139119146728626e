package normalize

import "errors"

// ErrInvalidOptions is wrapped by the errors of [Options.Validate].
var ErrInvalidOptions = errors.New("invalid normalize options")

// ErrRejected is matched by every [Rejection]: normalization cannot use an
// object.
var ErrRejected = errors.New("object rejected")
