package file

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/spoke/normalize"
)

// Debouncing: an editor's save is several events (write, rename, chmod).
// Reload once they have been quiet for quietPeriod, but no later than
// maxDelay after the first, so that a steady stream of writes cannot
// starve the reload.
const (
	defaultQuietPeriod = 50 * time.Millisecond
	defaultMaxDelay    = 500 * time.Millisecond
)

// Source serves a directory of Kubernetes manifests as a cluster.
type Source struct {
	dir         string
	log         *slog.Logger
	now         func() time.Time // stamps objects without a creationTimestamp
	quietPeriod time.Duration
	maxDelay    time.Duration
}

// New returns a source reading the manifests under dir. A nil log discards.
func New(dir string, log *slog.Logger) *Source {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{
		dir:         dir,
		log:         log.With("dir", dir),
		now:         time.Now,
		quietPeriod: defaultQuietPeriod,
		maxDelay:    defaultMaxDelay,
	}
}

// Run reads the directory and calls fn with its objects and the changes
// since the previous call (on the first call: every object), then again
// after each change of the directory's contents, until ctx ends. fn is
// called from Run's goroutine; each call gets a new immutable Inputs.
// Reloads that change nothing do not call fn.
//
// It returns nil when ctx ends, and an error at once when the directory
// cannot be read, or later when it disappears.
func (s *Source) Run(ctx context.Context, fn func(in normalize.Inputs, changes []normalize.Change)) error {
	if info, err := os.Stat(s.dir); err != nil {
		return fmt.Errorf("manifests: %w", err)
	} else if !info.IsDir() {
		return fmt.Errorf("manifests: %s: %w", s.dir, ErrNotDirectory)
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("manifests %s: watch: %w", s.dir, err)
	}
	defer func() {
		if err := watcher.Close(); err != nil {
			s.log.Warn("cannot close manifest watcher", "err", err)
		}
	}()

	st := &state{
		Source:    s,
		watcher:   watcher,
		files:     map[string]*fileState{},
		firstSeen: map[key]metav1.Time{},
	}
	// Watches are added during the walk, before files are read, so no
	// change after a read goes unnoticed.
	in, changes, err := st.reload()
	if err != nil {
		return err
	}
	fn(in, changes)

	timer := time.NewTimer(0)
	timer.Stop()
	var burstStart time.Time // zero when no reload is pending
	schedule := func() {
		now := time.Now()
		if burstStart.IsZero() {
			burstStart = now
		}
		timer.Reset(min(s.quietPeriod, burstStart.Add(s.maxDelay).Sub(now)))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events:
			if !ok {
				return fmt.Errorf("manifests %s: %w", s.dir, ErrWatchClosed)
			}
			s.log.Debug("manifest event", "file", ev.Name, "op", ev.Op)
			schedule()
		case err, ok := <-watcher.Errors:
			if !ok {
				return fmt.Errorf("manifests %s: %w", s.dir, ErrWatchClosed)
			}
			// Most likely an overflow: events were lost, so reload.
			s.log.Warn("manifest watch error", "err", err)
			schedule()
		case <-timer.C:
			burstStart = time.Time{}
			in, changes, err := st.reload()
			if err != nil {
				return err
			}
			if len(changes) > 0 {
				fn(in, changes)
			}
		}
	}
}

// state is what Run keeps between reloads. Only Run's goroutine uses it.
type state struct {
	*Source
	watcher *fsnotify.Watcher
	files   map[string]*fileState // by path relative to dir, with slashes
	// When objects without a creationTimestamp were first seen, so that
	// the time stays put across reloads and MCS "oldest export wins" holds.
	firstSeen  map[key]metav1.Time
	objects    map[key]metav1.Object // as last passed to fn
	duplicates map[duplicate]bool    // as last warned about
}

// duplicate is an object defined in two files.
type duplicate struct {
	key
	previousFile, file string
}

// fileState is what is kept of a file: not its bytes, only their hash,
// so that an unchanged file is neither parsed nor logged about again.
type fileState struct {
	sum     [sha256.Size]byte
	objects []object // the last good parse
}

// reload reads the directory and returns the new inputs and the changes.
func (st *state) reload() (normalize.Inputs, []normalize.Change, error) {
	paths, err := st.walk()
	if err != nil {
		return nil, nil, err
	}
	present := make(map[string]bool, len(paths))
	for _, path := range paths {
		present[path] = true
		st.readFile(path)
	}
	for path := range st.files {
		if !present[path] {
			delete(st.files, path)
		}
	}

	objects := map[key]metav1.Object{}
	origin := map[key]string{}
	duplicates := map[duplicate]bool{}
	for _, path := range paths { // sorted: the last file wins
		f, ok := st.files[path]
		if !ok {
			continue
		}
		for _, o := range f.objects {
			if prev, ok := origin[o.key]; ok {
				d := duplicate{o.key, prev, path}
				duplicates[d] = true
				if !st.duplicates[d] { // warn once, not on every reload
					st.log.Warn("duplicate manifest object; the last file wins",
						"kind", o.kind.String(), "namespace", o.namespace, "name", o.name, "file", path, "previous_file", prev)
				}
			}
			objects[o.key] = o.obj
			origin[o.key] = path
		}
	}
	st.duplicates = duplicates
	for k := range st.firstSeen {
		if _, ok := objects[k]; !ok {
			delete(st.firstSeen, k) // deleted: a new object of that name is new
		}
	}

	changes := diff(st.objects, objects)
	st.objects = objects
	return newSnapshot(objects), changes, nil
}

// walk returns the manifest files under dir, as sorted slash-separated
// relative paths, and watches every directory it visits. Hidden files and
// directories are skipped: editors' temporary files, and the timestamped
// directories of a mounted ConfigMap (whose files are reached through
// their symlinks).
func (st *state) walk() ([]string, error) {
	root, err := filepath.EvalSymlinks(st.dir)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	var paths []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			st.log.Warn("cannot read manifest directory entry", "file", path, "err", err)
			return nil
		}
		hidden := path != root && strings.HasPrefix(d.Name(), ".")
		if d.IsDir() {
			if hidden {
				return fs.SkipDir
			}
			if err := st.watcher.Add(path); err != nil {
				st.log.Warn("cannot watch manifest directory", "file", path, "err", err)
			}
			return nil
		}
		if hidden || !isManifest(d.Name()) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// Follow links to files, not to directories (no cycles).
			if info, err := os.Stat(path); err != nil || !info.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		paths = append(paths, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", st.dir, err)
	}
	slices.Sort(paths) // WalkDir's order puts "a/x.yaml" before "a.yaml"
	return paths, nil
}

func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// readFile updates the state of one file. A file that cannot be read or
// parsed keeps its last good objects: a half-saved file must not withdraw
// services from the whole clusterset.
func (st *state) readFile(path string) {
	data, err := os.ReadFile(filepath.Join(st.dir, filepath.FromSlash(path)))
	if err != nil {
		st.log.Error("cannot read manifest file; keeping its last good objects", "file", path, "err", err)
		return
	}
	sum := sha256.Sum256(data)
	prev, ok := st.files[path]
	if ok && prev.sum == sum {
		return
	}
	if !ok {
		prev = &fileState{}
		st.files[path] = prev
	}
	prev.sum = sum

	objects, skips, err := parse(data)
	logSkipped(st.log, path, skips)
	if err != nil {
		attrs := []any{"file", path, "err", err}
		if de := (*docError)(nil); errors.As(err, &de) {
			attrs = []any{"file", path, "document", de.Document, "document_line", de.Line, "err", de.Err}
		}
		st.log.Error("cannot parse manifest file; keeping its last good objects", attrs...)
		return
	}
	for _, o := range objects {
		st.stamp(o)
	}
	prev.objects = objects
	st.log.Debug("manifest file read", "file", path, "objects", len(objects))
}

// stamp gives a Service or ServiceExport without a creationTimestamp the
// time the source first saw it. Objects are stamped before anyone else
// sees them, and never changed after.
func (st *state) stamp(o object) {
	if o.kind != normalize.KindService && o.kind != normalize.KindServiceExport {
		return
	}
	if created := o.obj.GetCreationTimestamp(); !created.IsZero() {
		return
	}
	t, ok := st.firstSeen[o.key]
	if !ok {
		t = metav1.NewTime(st.now())
		st.firstSeen[o.key] = t
	}
	o.obj.SetCreationTimestamp(t)
}

// logSkipped logs the kinds of a file the source does not read, once per
// kind: at warn level for a kind it reads in another apiVersion (likely a
// mistake), else at debug level (a Deployment next to its Service).
func logSkipped(log *slog.Logger, path string, skips []skipped) {
	counts := map[skipped]int{}
	for _, s := range skips {
		counts[s]++
	}
	for s, n := range counts {
		logf := log.Debug
		if knownKind(s.Kind) {
			logf = log.Warn
		}
		logf("skipping manifest objects of an unsupported kind",
			"file", path, "apiVersion", s.APIVersion, "kind", s.Kind, "count", n)
	}
}
