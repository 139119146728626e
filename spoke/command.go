package spoke

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/memlimit"
	"github.com/meshfed/meshfed/internal/version"
)

// Command runs the spoke's command line until ctx ends: `meshfed spoke`
// and `meshfed-spoke` (name is the command as typed). It reports this
// build's version to the hub.
func Command(ctx context.Context, name string, args []string, stderr io.Writer) error {
	cfg := DefaultConfig()
	cfg.Build = version.Version()
	log, err := cli.ParseCommand(name, args, stderr, cfg.AddFlags, Help)
	if err != nil {
		return err
	}
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	// New has validated them; set them before the spoke allocates.
	memlimit.Set(log, cfg.MemoryLimitRatio)
	memlimit.SetGCPercent(log, cfg.GCPercent)
	return s.Run(ctx)
}

// Help is the spoke command's -h: its flags by what they configure.
var Help = cli.Help{
	Summary: "Run a spoke: federate one cluster's exported services, endpoints and workloads to the hub.",
	Groups: []cli.FlagGroup{
		{Title: "This cluster", Flags: []string{"cluster-id", "network", "trust-domain", "domain-suffix", "export", "system-namespace", "gateway-namespaces"}},
		{Title: "Source: the cluster's API or a directory of manifests", Flags: []string{"kubeconfig", "manifests"}, Prefixes: []string{"kube-"}},
		{Title: "Hub: address, TLS and stream", Flags: []string{"hub", "hub-resolve-interval", "tls-cert", "tls-key", "tls-ca", "tls-server-name", "insecure", "keepalive-time", "ack-timeout", "max-message-bytes"}},
		{Title: "Leader election: several spokes for one cluster", Prefixes: []string{"leader-elect"}},
		{Title: "Debug port", Prefixes: []string{"debug-"}},
		{Title: "Logging and runtime", Flags: []string{"log-level", "log-format", "memory-limit-ratio", "gc-percent"}},
	},
	Examples: []string{
		"# A cluster's API, through a kubeconfig (in a pod: the pod's cluster)\n" +
			"meshfed spoke --cluster-id east --network network-east --hub hub.example.com:9443 \\\n" +
			"    --tls-cert certs/east.crt --tls-key certs/east.key --tls-ca certs/ca.crt --kubeconfig ~/.kube/east",
		"# A directory of manifests instead of an API server\n" +
			"meshfed spoke --cluster-id east --network network-east --hub localhost:9443 --insecure --manifests examples/demo/east",
	},
}
