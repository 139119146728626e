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

// TestRunIsMeshfedSpoke: the binary runs `meshfed spoke` under its own
// name (cli.Single does the rest, and is tested there).
func TestRunIsMeshfedSpoke(t *testing.T) {
	for _, args := range [][]string{{"spoke", "-h"}, {"--help"}} {
		var stderr bytes.Buffer
		if err := run(t.Context(), args, &bytes.Buffer{}, &stderr); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("run(%q) = %v, want flag.ErrHelp", args, err)
		}
		if !strings.Contains(stderr.String(), "Usage:\n  meshfed-spoke [flags]") || !strings.Contains(stderr.String(), "\n  --gc-percent") {
			t.Errorf("run(%q): no spoke usage:\n%s", args, stderr.String())
		}
	}
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"--version"}, &stdout, &bytes.Buffer{}); err != nil || stdout.String() != "meshfed-spoke "+version.String()+"\n" {
		t.Errorf("--version: %q, %v", stdout.String(), err)
	}
}

// TestLinksOnlyTheSpoke guards what makes this binary small: none of the
// hub's code, of client-go only what the spoke's REST clients need (the
// clientset and discovery client register every API group), and none of
// go-control-plane (the MCP server speaks ADS through messages of its
// own).
func TestLinksOnlyTheSpoke(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-tags=grpcnotrace", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	denied := []string{
		"github.com/meshfed/meshfed/hub",
		"github.com/meshfed/meshfed/xds",
		"github.com/meshfed/meshfed/bench",
		"github.com/envoyproxy/",
		"github.com/cncf/xds",
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/discovery",
		// Its package links the clientset; spoke/leader implements the
		// algorithm over a Lease-only REST client.
		"k8s.io/client-go/tools/leaderelection",
		"sigs.k8s.io/mcs-api/pkg/client",
		// As the Makefile's BUILDTAGS build it: text/template's
		// MethodByName would keep every exported method linked.
		"golang.org/x/net/trace",
		"text/template",
		"html/template",
	}
	groups := 0
	for pkg := range strings.Lines(string(out)) {
		pkg = strings.TrimSpace(pkg)
		for _, d := range denied {
			if strings.HasPrefix(pkg, d) {
				t.Errorf("meshfed-spoke links %s", pkg)
			}
		}
		if strings.HasPrefix(pkg, "k8s.io/api/") {
			groups++
		}
	}
	// core/v1, discovery/v1 and coordination/v1 (the leader election's
	// Lease): each group links every type it registers.
	if groups > 3 {
		t.Errorf("meshfed-spoke links %d k8s.io/api packages, want at most 3", groups)
	}
}
