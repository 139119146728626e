package pki

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// reloadInterval bounds how often a handshake looks at the files of a key
// pair or CA bundle.
const reloadInterval = 5 * time.Second

// reloading is a value parsed from files and parsed again when one of them
// changes. The check runs when the value is asked for, at most once per
// reloadInterval, so that no goroutine watches the files: handshakes (and
// metric scrapes) are what ask.
type reloading[T any] struct {
	files []string
	parse func() (T, error)
	now   func() time.Time
	// reloaded and failed log a reload and a failed one; failed is given
	// the value kept in use.
	reloaded func(T)
	failed   func(kept T, err error)

	mu      sync.Mutex
	val     T
	stamp   []fileStamp // of the files val was parsed from
	checked time.Time   // when the files were last looked at
}

// fileStamp identifies a version of a file. Rotation by cert-manager or
// the kubelet (a symlink swap) changes the target's modification time; the
// size catches filesystems with coarse timestamps.
type fileStamp struct{ mod, size int64 }

// init parses the files for the first time.
func (r *reloading[T]) init() error {
	val, stamp, err := r.load()
	if err != nil {
		return err
	}
	r.val, r.stamp, r.checked = val, stamp, r.now()
	return nil
}

// load parses the files, taking the stamps first: a file replaced after
// the stat is seen as changed, and parsed again, at the next check.
func (r *reloading[T]) load() (T, []fileStamp, error) {
	var zero T
	stamp, err := r.statFiles()
	if err != nil {
		return zero, nil, err
	}
	val, err := r.parse()
	if err != nil {
		return zero, nil, err
	}
	return val, stamp, nil
}

func (r *reloading[T]) statFiles() ([]fileStamp, error) {
	out := make([]fileStamp, len(r.files))
	for i, name := range r.files {
		fi, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("stat: %w", err)
		}
		out[i] = fileStamp{mod: fi.ModTime().UnixNano(), size: fi.Size()}
	}
	return out, nil
}

// current returns the value in use, first parsing the files again if the
// check interval has passed and they changed. A failed reload is logged
// and leaves the previous value in use; it is retried at the next check.
func (r *reloading[T]) current() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < reloadInterval {
		return r.val
	}
	r.checked = now
	stamp, err := r.statFiles()
	if err == nil && slices.Equal(stamp, r.stamp) {
		return r.val
	}
	var val T
	if err == nil {
		val, stamp, err = r.load()
	}
	if err != nil {
		r.failed(r.val, err)
		return r.val
	}
	r.val, r.stamp = val, stamp
	r.reloaded(val)
	return r.val
}

// orDiscard returns logger, or one that discards when it is nil.
func orDiscard(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return logger
}
