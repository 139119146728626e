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

// TestRunIsMeshfedHub: the binary runs `meshfed hub` under its own
// name (cli.Single does the rest, and is tested there).
func TestRunIsMeshfedHub(t *testing.T) {
	for _, args := range [][]string{{"hub", "-h"}, {"--help"}} {
		var stderr bytes.Buffer
		if err := run(t.Context(), args, &bytes.Buffer{}, &stderr); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("run(%q) = %v, want flag.ErrHelp", args, err)
		}
		if !strings.Contains(stderr.String(), "Usage:\n  meshfed-hub [flags]") || !strings.Contains(stderr.String(), "\n  --clusters-config") {
			t.Errorf("run(%q): no hub usage:\n%s", args, stderr.String())
		}
	}
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"--version"}, &stdout, &bytes.Buffer{}); err != nil || stdout.String() != "meshfed-hub "+version.String()+"\n" {
		t.Errorf("--version: %q, %v", stdout.String(), err)
	}
}

// TestLinksOnlyTheHub guards what makes this binary lean: no client-go,
// no Kubernetes API types or runtime machinery, none of the spoke, the
// demo or the load harness, and none of go-control-plane's generated
// Envoy types (the hub writes Envoy's resources by hand and reads ADS
// through messages of its own; Envoy's descriptors alone cost megabytes of
// binary and heap).
func TestLinksOnlyTheHub(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-tags=grpcnotrace", ".").Output()
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
		"github.com/envoyproxy/",
		"github.com/cncf/xds",
		// As the Makefile's BUILDTAGS build it: text/template's
		// MethodByName would keep every exported method linked.
		"golang.org/x/net/trace",
		"text/template",
		"html/template",
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
