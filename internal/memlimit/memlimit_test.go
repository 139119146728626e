package memlimit

import (
	"bytes"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"
)

const (
	v2 = cgroupV2File
	v1 = cgroupV1File
)

func TestSet(t *testing.T) {
	tests := []struct {
		name       string
		files      map[string]string
		gomemlimit string
		ratio      float64
		want       int64  // the limit set; 0: none
		wantLog    string // a line of the log starts with it
	}{
		{
			name:    "cgroup v2",
			files:   map[string]string{v2: "268435456\n"},
			ratio:   DefaultRatio,
			want:    241591910, // 256 MiB × 0.9
			wantLog: `level=INFO msg="memory limit set from the cgroup" limit=241591910 cgroup_limit=268435456 ratio=0.9 source=/sys/fs/cgroup/memory.max`,
		},
		{
			name:    "cgroup v2 wins over v1",
			files:   map[string]string{v2: "1073741824\n", v1: "268435456\n"},
			ratio:   DefaultRatio,
			want:    966367641,
			wantLog: `level=INFO msg="memory limit set from the cgroup" limit=966367641 cgroup_limit=1073741824`,
		},
		{
			name:    "cgroup v2 without a limit",
			files:   map[string]string{v2: "max\n", v1: "268435456\n"},
			ratio:   DefaultRatio,
			wantLog: `level=INFO msg="memory limit not set: the cgroup has no memory limit" source=/sys/fs/cgroup/memory.max`,
		},
		{
			name:    "cgroup v1",
			files:   map[string]string{v1: "536870912\n"},
			ratio:   DefaultRatio,
			want:    483183820,
			wantLog: `level=INFO msg="memory limit set from the cgroup" limit=483183820 cgroup_limit=536870912 ratio=0.9 source=/sys/fs/cgroup/memory/memory.limit_in_bytes`,
		},
		{
			name:    "cgroup v1 without a limit",
			files:   map[string]string{v1: "9223372036854771712\n"},
			ratio:   DefaultRatio,
			wantLog: `level=INFO msg="memory limit not set: the cgroup has no memory limit" source=/sys/fs/cgroup/memory/memory.limit_in_bytes`,
		},
		{
			name:    "cgroup v1 without a limit, 64 KiB pages",
			files:   map[string]string{v1: "9223372036854710272\n"},
			ratio:   DefaultRatio,
			wantLog: `level=INFO msg="memory limit not set: the cgroup has no memory limit"`,
		},
		{
			name:    "no cgroup files",
			files:   map[string]string{"sys/fs/cgroup/cpu.max": "max 100000\n"},
			ratio:   DefaultRatio,
			wantLog: `level=INFO msg="memory limit not set: no cgroup memory limit found"`,
		},
		{
			name:       "GOMEMLIMIT wins",
			files:      map[string]string{v2: "268435456\n"},
			ratio:      DefaultRatio,
			gomemlimit: "100MiB",
			wantLog:    `level=INFO msg="memory limit from GOMEMLIMIT" gomemlimit=100MiB`,
		},
		{
			name:       "GOMEMLIMIT=off wins too",
			files:      map[string]string{v2: "268435456\n"},
			ratio:      DefaultRatio,
			gomemlimit: "off",
			wantLog:    `level=INFO msg="memory limit from GOMEMLIMIT" gomemlimit=off`,
		},
		{
			name:    "another ratio",
			files:   map[string]string{v2: "268435456\n"},
			ratio:   0.5,
			want:    134217728,
			wantLog: `level=INFO msg="memory limit set from the cgroup" limit=134217728 cgroup_limit=268435456 ratio=0.5`,
		},
		{
			name:    "ratio 0 turns it off",
			files:   map[string]string{v2: "268435456\n"},
			ratio:   0,
			wantLog: `level=INFO msg="memory limit not set from the cgroup: the ratio is 0"`,
		},
		{
			name:    "ratio out of range",
			files:   map[string]string{v2: "268435456\n"},
			ratio:   1,
			wantLog: `level=WARN msg="memory limit not set: the ratio is outside [0, 1)" ratio=1`,
		},
		{
			name:    "malformed v2",
			files:   map[string]string{v2: "256Mi\n", v1: "268435456\n"},
			ratio:   DefaultRatio,
			wantLog: `level=WARN msg="memory limit not set: cannot read the cgroup memory limit" err="/sys/fs/cgroup/memory.max: limit \"256Mi\" is not a byte count"`,
		},
		{
			name:    "malformed v1",
			files:   map[string]string{v1: "-1\n"},
			ratio:   DefaultRatio,
			wantLog: `level=WARN msg="memory limit not set: cannot read the cgroup memory limit" err="/sys/fs/cgroup/memory/memory.limit_in_bytes: limit \"-1\" is not a byte count"`,
		},
		{
			name:    "empty file",
			files:   map[string]string{v2: ""},
			ratio:   DefaultRatio,
			wantLog: `level=WARN msg="memory limit not set: cannot read the cgroup memory limit" err="/sys/fs/cgroup/memory.max: limit \"\" is not a byte count"`,
		},
		{
			name:    "zero limit",
			files:   map[string]string{v2: "0\n"},
			ratio:   DefaultRatio,
			wantLog: `level=WARN msg="memory limit not set: cannot read the cgroup memory limit" err="/sys/fs/cgroup/memory.max: limit is 0 bytes"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tt.gomemlimit) // empty reads as unset, to the runtime too
			fsys := fstest.MapFS{}
			for name, data := range tt.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			var got []int64
			set(log, fsys, tt.ratio, func(limit int64) int64 {
				got = append(got, limit)
				return 0
			})

			switch {
			case tt.want == 0 && len(got) != 0:
				t.Errorf("set the limit to %d, want it left alone", got)
			case tt.want != 0 && (len(got) != 1 || got[0] != tt.want):
				t.Errorf("set the limit to %d, want [%d]", got, tt.want)
			}
			if !hasLinePrefix(logs.String(), tt.wantLog) {
				t.Errorf("log:\n%s\nwant a line starting with\n%s", logs.String(), tt.wantLog)
			}
		})
	}
}

func hasLinePrefix(text, prefix string) bool {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// TestSetKeepsGOMEMLIMIT calls the exported Set, which would change this
// process's limit but for GOMEMLIMIT.
func TestSetKeepsGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "1GiB")
	before := debug.SetMemoryLimit(-1)
	Set(slog.New(slog.DiscardHandler), DefaultRatio)
	if after := debug.SetMemoryLimit(-1); after != before {
		debug.SetMemoryLimit(before)
		t.Errorf("Set changed the memory limit from %d to %d despite GOMEMLIMIT", before, after)
	}
}

func TestSetGCPercent(t *testing.T) {
	tests := []struct {
		name    string
		gogc    string
		percent int
		want    int // -1: not applied
	}{
		{"applied", "", 50, 50},
		{"zero keeps Go's default", "", 0, -1},
		{"GOGC wins", "200", 50, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			got := -1
			setGCPercent(slog.New(slog.DiscardHandler), tc.percent, func(p int) int { got = p; return 100 })
			if got != tc.want {
				t.Errorf("applied %d, want %d", got, tc.want)
			}
		})
	}
}
