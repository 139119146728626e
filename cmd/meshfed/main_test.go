package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testlog"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// TestDemoAndStatus runs `meshfed demo` on free ports and asks it for its
// status the way a user would.
func TestDemoAndStatus(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var out testlog.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--dir", t.TempDir(), "--federation-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0"}, &out, io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	}()

	debugAddr := regexp.MustCompile(`debug http://(\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var addr string
	for addr == "" {
		if m := debugAddr.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("demo ended early: %v\n%s", err, out.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not report ready:\n%s", out.String())
		}
	}

	var status bytes.Buffer
	if err := run(t.Context(), []string{"status", "--debug-addr", addr}, &status, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"east     network-east  true", "west     network-west  true"} {
		if !strings.Contains(status.String(), want) {
			t.Errorf("status does not show %q:\n%s", want, status.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	if err := run(t.Context(), []string{"nope"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown command "nope"`) {
		t.Errorf("run(nope) = %v", err)
	}
}

// TestMemoryLimitRatio checks that both long-running commands take
// --memory-limit-ratio and refuse a bad one before they start.
func TestMemoryLimitRatio(t *testing.T) {
	spoke := []string{"spoke", "--cluster-id", "east", "--insecure", "--manifests", t.TempDir()}
	hub := []string{"hub", "--insecure", "--federation-addr", "127.0.0.1:0", "--xds-addr", "", "--debug-addr", ""}
	for _, args := range [][]string{hub, spoke} {
		for value, wantErr := range map[string]string{
			"1":    "--memory-limit-ratio 1 is outside [0, 1)",
			"-0.5": "--memory-limit-ratio -0.5 is outside [0, 1)",
			"90%":  `invalid value "90%" for flag -memory-limit-ratio`,
		} {
			args := append(slices.Clone(args), "--memory-limit-ratio", value)
			if err := run(t.Context(), args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("meshfed %q = %v, want an error saying %q", args, err, wantErr)
			}
		}
	}
}
