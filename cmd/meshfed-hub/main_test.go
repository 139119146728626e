package main

import (
	"bytes"
	"errors"
	"flag"
	"os/exec"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/internal/version"
)

// TestRunTakesMeshfedsArguments: `meshfed-hub hub ...` parses as
// `meshfed-hub ...` (and `meshfed hub ...`).
func TestRunTakesMeshfedsArguments(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"hub", "-h"}} {
		var stderr bytes.Buffer
		if err := run(t.Context(), args, &bytes.Buffer{}, &stderr); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("run(%q) = %v, want flag.ErrHelp", args, err)
		}
		if !strings.Contains(stderr.String(), "Usage of meshfed-hub") || !strings.Contains(stderr.String(), "-clusters-config") {
			t.Errorf("run(%q) printed no hub usage:\n%s", args, stderr.String())
		}
	}
	for _, args := range [][]string{{"hub", "version"}, {"version"}, {"--version"}} {
		var stdout bytes.Buffer
		if err := run(t.Context(), args, &stdout, &bytes.Buffer{}); err != nil || stdout.String() != "meshfed-hub "+version.String()+"\n" {
			t.Errorf("%q: %q, %v", args, stdout.String(), err)
		}
	}
}

// TestLinksOnlyTheHub guards what makes this binary lean: no client-go,
// no Kubernetes API types or runtime machinery, none of the spoke, the
// demo or the load harness.
func TestLinksOnlyTheHub(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	denied := []string{
		"github.com/meshfed/meshfed/spoke",
		"github.com/meshfed/meshfed/bench",
		"github.com/meshfed/meshfed/examples",
		"k8s.io/client-go",
		"k8s.io/api/",
		"k8s.io/apimachinery/pkg/runtime",
		"k8s.io/apimachinery/pkg/apis",
		"sigs.k8s.io/controller-runtime",
		"sigs.k8s.io/mcs-api",
	}
	for pkg := range strings.Lines(string(out)) {
		pkg = strings.TrimSpace(pkg)
		for _, d := range denied {
			if strings.HasPrefix(pkg, d) {
				t.Errorf("meshfed-hub links %s", pkg)
			}
		}
	}
}
