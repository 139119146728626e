package hub

import (
	"context"
	"io"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/memlimit"
)

// Command runs the hub's command line until ctx ends: `meshfed hub` and
// `meshfed-hub` (name is the command as typed).
func Command(ctx context.Context, name string, args []string, stderr io.Writer) error {
	cfg := DefaultConfig()
	log, err := cli.ParseCommand(name, args, stderr, cfg.AddFlags, Help)
	if err != nil {
		return err
	}
	h, err := New(cfg, log)
	if err != nil {
		return err
	}
	// New has validated the ratio; set the limit before the hub allocates.
	memlimit.Set(log, cfg.MemoryLimitRatio)
	memlimit.SetGCPercent(log, cfg.GCPercent)
	return h.Run(ctx)
}

// Help is the hub command's -h: its flags by what they configure.
var Help = cli.Help{
	Summary: "Run the hub: spokes stream their clusters to it, and it serves the merged clusterset to proxies over xDS.",
	Groups: []cli.FlagGroup{
		{Title: "Listeners", Flags: []string{"federation-addr", "xds-addr", "debug-addr", "id"}},
		{Title: "Spokes: TLS and connections", Flags: []string{"tls-cert", "tls-key", "tls-ca", "trust-domain", "insecure", "keepalive-time", "keepalive-timeout", "max-message-bytes"}},
		{
			Title: "Clusters: policy, caps, leases and MCS",
			Flags: []string{
				"clusters-config", "clusters-config-interval", "max-services-per-cluster", "max-endpoints-per-cluster",
				"max-workloads-per-cluster", "stale-after", "withdraw-after", "clusterset-cidr",
			},
		},
		{Title: "Proxies: xDS", Prefixes: []string{"xds-"}},
		{Title: "Debug port", Prefixes: []string{"debug-"}},
		{Title: "Logging and runtime", Flags: []string{"log-level", "log-format", "memory-limit-ratio", "gc-percent"}},
	},
	Examples: []string{
		"# Try it out: a throwaway CA (meshfed certs), xDS on loopback\n" +
			"meshfed hub --tls-cert certs/hub.crt --tls-key certs/hub.key --tls-ca certs/ca.crt --xds-addr 127.0.0.1:15010",
		"# Only the clusters a policy file names may join\n" +
			"meshfed hub --tls-cert hub.crt --tls-key hub.key --tls-ca ca.crt --clusters-config clusters.yaml \\\n" +
			"    --xds-tls-cert xds.crt --xds-tls-key xds.key --xds-tls-ca mesh-ca.crt",
	},
}
