package version

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	want := `
# HELP meshfed_build_info The build of meshfed this process runs: always 1, with the version, revision and Go version as labels.
# TYPE meshfed_build_info gauge
meshfed_build_info{goversion="` + runtime.Version() + `",revision="` + Revision() + `",version="` + Version() + `"} 1
`
	if err := testutil.CollectAndCompare(NewCollector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestString(t *testing.T) {
	if Version() == "" {
		t.Error("Version() is empty; want dev at least")
	}
	if s := String(); !strings.HasPrefix(s, Version()+" (") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("String() = %q", s)
	}
}
