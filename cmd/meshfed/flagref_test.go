package main

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var updateFlagReference = flag.Bool("update", false, "rewrite docs/flags.md from the flags")

// flagReference is the page writeFlagReference writes.
const flagReference = "../../docs/flags.md"

// TestFlagReference keeps docs/flags.md the flags': run it with -update
// (make gen does) after a flag changes.
func TestFlagReference(t *testing.T) {
	var b bytes.Buffer
	writeFlagReference(&b)
	if *updateFlagReference {
		if err := os.WriteFile(flagReference, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(flagReference)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("%s is not the flags' (go test ./cmd/meshfed -run TestFlagReference -update) (-page +flags):\n%s", flagReference, diff)
	}
	for _, c := range commands() {
		if c.flags != nil && c.help == nil {
			t.Errorf("meshfed %s has flags but no help: they are not in the reference", c.name)
		}
	}
}
