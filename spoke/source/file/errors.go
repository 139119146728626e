package file

import "errors"

var (
	// ErrNotDirectory is returned by Run when the manifests path is not a directory.
	ErrNotDirectory = errors.New("not a directory")
	// ErrWatchClosed is returned by Run when the file watcher stops on its own.
	ErrWatchClosed = errors.New("file watcher closed")

	errNoKind = errors.New("no apiVersion or kind")
)
