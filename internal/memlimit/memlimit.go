package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultRatio is the share of the container's memory limit that becomes the
// Go soft limit. The rest leaves room for what the Go limit does not count
// or cannot hold back: memory outside the Go heap and runtime, and the heap's
// growth while the collector catches up.
const DefaultRatio = 0.9

// The cgroup files that hold the container's memory limit, relative to the
// root of the file system.
const (
	// cgroupV2File holds a byte count or "max" (no limit).
	cgroupV2File = "sys/fs/cgroup/memory.max"
	// cgroupV1File holds a byte count; no limit reads as the largest
	// page-aligned int64 (9223372036854771712 with 4 KiB pages).
	cgroupV1File = "sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// unlimited is where limits stop being limits: cgroup v1 stores "none" as
// math.MaxInt64 rounded down to the page size, which varies by platform.
const unlimited = 1 << 62

// Set makes ratio × the container's memory limit the Go runtime's soft
// memory limit, and logs what it did. It does nothing when GOMEMLIMIT is
// set, when ratio is 0, or when the container has no memory limit. Call it
// once, at process start; ratio must be in [0, 1).
func Set(log *slog.Logger, ratio float64) {
	set(log, os.DirFS("/"), ratio, debug.SetMemoryLimit)
}

// set is Set reading the cgroup files from fsys and setting the limit with
// apply.
func set(log *slog.Logger, fsys fs.FS, ratio float64, apply func(int64) int64) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "gomemlimit", v)
		return
	}
	if ratio == 0 {
		log.Info("memory limit not set from the cgroup: the ratio is 0")
		return
	}
	if !(ratio > 0 && ratio < 1) {
		log.Warn("memory limit not set: the ratio is outside [0, 1)", "ratio", ratio)
		return
	}
	limit, source, err := cgroupLimit(fsys)
	switch {
	case err != nil:
		log.Warn("memory limit not set: cannot read the cgroup memory limit", "err", err)
		return
	case source == "":
		log.Info("memory limit not set: no cgroup memory limit found")
		return
	case limit == 0:
		log.Info("memory limit not set: the cgroup has no memory limit", "source", "/"+source)
		return
	}
	soft := int64(float64(limit) * ratio)
	apply(soft)
	log.Info("memory limit set from the cgroup", "limit", soft, "cgroup_limit", limit, "ratio", ratio, "source", "/"+source)
}

// cgroupLimit returns the container's memory limit in bytes (0: none) and
// the file it read, "" when there is neither cgroup file.
func cgroupLimit(fsys fs.FS) (limit int64, source string, err error) {
	for _, name := range []string{cgroupV2File, cgroupV1File} {
		data, err := fs.ReadFile(fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, "", err
		}
		limit, err := parseLimit(strings.TrimSpace(string(data)))
		if err != nil {
			return 0, "", fmt.Errorf("/%s: %w", name, err)
		}
		return limit, name, nil
	}
	return 0, "", nil
}

// parseLimit parses a cgroup memory limit, returning 0 for none.
func parseLimit(s string) (int64, error) {
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("limit %q is not a byte count", s)
	case n == 0:
		return 0, errors.New("limit is 0 bytes")
	case n >= unlimited:
		return 0, nil
	}
	return int64(n), nil
}

// SetGCPercent makes percent the garbage collector's target (as GOGC
// would), and logs what it did. It does nothing when GOGC is set or when
// percent is 0 (Go's default, 100, stays). Call it once, at process start.
func SetGCPercent(log *slog.Logger, percent int) {
	setGCPercent(log, percent, debug.SetGCPercent)
}

func setGCPercent(log *slog.Logger, percent int, apply func(int) int) {
	if v := os.Getenv("GOGC"); v != "" {
		log.Info("garbage collection target from GOGC", "gogc", v)
		return
	}
	if percent <= 0 {
		return
	}
	apply(percent)
	log.Info("garbage collection target set", "gc_percent", percent)
}

// Release returns the heap's free memory to the operating system at once,
// and logs msg with the heap's figures. Call it after a burst the process
// knows of (an initial sync): the runtime would otherwise hand the memory
// back only slowly, and the process would hold its peak for minutes.
func Release(log *slog.Logger, msg string) {
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	log.Info(msg, "heap_in_use", m.HeapInuse, "heap_released", m.HeapReleased)
}
