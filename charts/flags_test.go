package charts_test

import (
	"flag"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/spoke"
)

// hubFlags parses args as `meshfed hub` does and validates the result, so the
// chart cannot pass a flag the hub lacks.
func hubFlags(t *testing.T, args []string) *flag.FlagSet {
	t.Helper()
	cfg := hub.DefaultConfig()
	fs := commandFlags(t, "hub", args, cfg.AddFlags)
	if err := cfg.Validate(); err != nil {
		t.Errorf("hub config from the chart: %v", err)
	}
	return fs
}

// spokeFlags parses args as `meshfed spoke` does in a pod, and validates
// the result: the chart passes no source flag, so the spoke reads the
// cluster it runs in.
func spokeFlags(t *testing.T, args []string) *flag.FlagSet {
	t.Helper()
	cfg := spoke.DefaultConfig()
	cfg.InCluster = true
	fs := commandFlags(t, "spoke", args, cfg.AddFlags)
	if err := cfg.Validate(); err != nil {
		t.Errorf("spoke config from the chart: %v", err)
	}
	return fs
}

func commandFlags(t *testing.T, command string, args []string, addFlags func(*flag.FlagSet)) *flag.FlagSet {
	t.Helper()
	if len(args) == 0 || args[0] != command {
		t.Fatalf("args %q, want %q first", args, command)
	}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addFlags(fs)
	// cmd/meshfed's log flags, declared by the command rather than the config.
	fs.String("log-level", "info", "")
	fs.String("log-format", "text", "")
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("meshfed %s %q: %v", command, args[1:], err)
	}
	if fs.NArg() != 0 {
		t.Errorf("meshfed %s: stray arguments %q", command, fs.Args())
	}
	return fs
}

func checkFlags(t *testing.T, fs *flag.FlagSet, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for name := range want {
		got[name] = fs.Lookup(name).Value.String()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s flags (-want +got):\n%s", fs.Name(), diff)
	}
}

func checkPorts(t *testing.T, ports []corev1.ContainerPort, want map[string]int32) {
	t.Helper()
	got := map[string]int32{}
	for _, p := range ports {
		got[p.Name] = p.ContainerPort
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("container ports (-want +got):\n%s", diff)
	}
}

func checkServicePorts(t *testing.T, svc corev1.Service, want map[string]int32) {
	t.Helper()
	got := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		got[p.Name] = p.Port
		if p.TargetPort.StrVal != p.Name {
			t.Errorf("Service port %s targets %s, want the container port of the same name", p.Name, p.TargetPort.String())
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Service %s ports (-want +got):\n%s", svc.Name, diff)
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

func isFalse(b *bool) bool { return b != nil && !*b }
