// Package version says which build of meshfed is running: the version and
// revision the linker stamps (make build: -X from git describe), or, for a
// plain go build or go install, what the Go toolchain recorded.
package version

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Set by the linker: -X github.com/meshfed/meshfed/internal/version.version=v0.3.0-4-gabcdef
// and -X ...revision=<commit>.
var version, revision string

var info = sync.OnceValue(func() (i struct{ version, revision string }) {
	i.version, i.revision = version, revision
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if i.version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.version = bi.Main.Version // go install module@version
	}
	if i.revision == "" {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && i.revision != "" {
			i.revision += "-dirty"
		}
	}
	return i
})

// Version is the build's version, "dev" when nothing stamped one.
func Version() string {
	if v := info().version; v != "" {
		return v
	}
	return "dev"
}

// Revision is the commit the build is from, "" when unknown.
func Revision() string { return info().revision }

// String is the version with its revision, for logs and `version`.
func String() string {
	if r := Revision(); r != "" {
		return Version() + " (" + r + ", " + runtime.Version() + ")"
	}
	return Version() + " (" + runtime.Version() + ")"
}

// NewCollector returns meshfed_build_info{version,revision,goversion} 1,
// the usual way to join a process's other series to its build.
func NewCollector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "meshfed_build_info",
		Help:        "The build of meshfed this process runs: always 1, with the version, revision and Go version as labels.",
		ConstLabels: prometheus.Labels{"version": Version(), "revision": Revision(), "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
