package pki

import "errors"

// ErrLocalFiles is wrapped by [UpdateLocal]'s errors about what its
// directory already holds: a CA without its key, a certificate that does
// not verify against the CA. Building on such files would hand out
// certificates that do not work together.
var ErrLocalFiles = errors.New("existing certificate files")
