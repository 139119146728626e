package policy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"k8s.io/utils/clock"
)

// Load reads and parses the policy file at path.
func Load(path, defaultTrustDomain string) (*Policy, []byte, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	p, err := Parse(data, defaultTrustDomain)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, data, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read cluster policy: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read cluster policy %s: %w", path, err)
	}
	return data, nil
}

// Watcher reloads a policy file when its content changes.
type Watcher struct {
	Path               string
	DefaultTrustDomain string
	// Interval between reads of the file. Reading a small file is cheaper
	// than being sure to see every way it can be replaced (a ConfigMap
	// volume swaps a symlink; an editor renames over it).
	Interval time.Duration
	// Apply receives each new policy, on the watcher's goroutine.
	Apply func(*Policy)
	// Result, when set, is told of each reload: nil for a policy applied,
	// else why the file was refused.
	Result func(error)
	Log    *slog.Logger
	Clock  clock.WithTicker // nil: the real clock
}

// Run watches until ctx ends. last is the content of the policy in force
// (as Load returned it): a file that still reads so is not applied again.
// A file that cannot be read or parsed is logged, once per content, and
// the policy in force stays.
func (w *Watcher) Run(ctx context.Context, last []byte) {
	clk := w.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	var lastBad []byte
	var lastErr string
	t := clk.NewTicker(w.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		data, err := readFile(w.Path)
		if err == nil && bytes.Equal(data, last) {
			continue
		}
		var p *Policy
		if err == nil {
			if bytes.Equal(data, lastBad) {
				continue
			}
			if p, err = Parse(data, w.DefaultTrustDomain); err != nil {
				err = fmt.Errorf("%s: %w", w.Path, err)
				lastBad = data
			}
		}
		if err != nil {
			if err.Error() != lastErr {
				w.Log.Error("cluster policy refused; the last good policy stays in force", "err", err)
				lastErr = err.Error()
				if w.Result != nil {
					w.Result(err)
				}
			}
			continue
		}
		last, lastBad, lastErr = data, nil, ""
		w.Apply(p)
		w.Log.Info("cluster policy reloaded", "path", w.Path, "clusters", len(p.ids))
		if w.Result != nil {
			w.Result(nil)
		}
	}
}
