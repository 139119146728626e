package normalize

import "errors"

// ErrInvalidOptions is wrapped by the errors of [Options.Validate].
var ErrInvalidOptions = errors.New("invalid normalize options")
