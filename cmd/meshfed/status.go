package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/debug"
	"github.com/meshfed/meshfed/internal/cli"
)

// statusOptions are meshfed status's flags.
type statusOptions struct {
	hub      hubTarget
	output   string
	timeout  time.Duration
	wait     bool
	clusters string
	// interval is how often --wait asks the hub again.
	interval time.Duration
}

// Defaults of --timeout: one answer, or the time --wait gives the
// clusterset to come up (a hub's warm-up alone may take 10s, and spokes
// back off to 30s between attempts to reach it).
const (
	statusTimeout = 5 * time.Second
	waitTimeout   = 2 * time.Minute
)

func statusFlags(fs *flag.FlagSet) *statusOptions {
	o := &statusOptions{interval: time.Second}
	o.hub.addFlags(fs)
	fs.StringVar(&o.output, "output", "table", "output format: table, json or yaml (json and yaml are /debug/clusters as the hub serves it)")
	fs.StringVar(&o.output, "o", "table", "short for --output")
	fs.BoolVar(&o.wait, "wait", false, "wait until every cluster the hub knows (and each of --clusters) is live and synced, and the hub is ready; exit non-zero naming those that are not after --timeout")
	fs.StringVar(&o.clusters, "clusters", "", "comma-separated clusters that must be live and synced: --wait waits for them too, and without --wait status fails when one is not")
	fs.DurationVar(&o.timeout, "timeout", 0, fmt.Sprintf("give up after this long (default %v; %v with --wait)", statusTimeout, waitTimeout))
	return o
}

var statusHelp = cli.Help{
	Summary: "Show the clusters a hub knows: their connection, lease, shard, the hub's answers and the spoke's build.\n" +
		"LAG is how long the cluster's newest change took from its spoke to the hub (see docs/operating.md).",
	Groups: []cli.FlagGroup{
		{Title: "Where the hub is", Flags: hubTargetFlags},
		{Title: "Output", Flags: []string{"output"}},
		{Title: "Waiting, for scripts and CI", Flags: []string{"wait", "clusters", "timeout"}},
	},
	Aliases: map[string]string{"o": "output"},
	Examples: []string{
		"# A hub on this machine (the default --debug-addr)\nmeshfed status",
		"# A hub in a cluster, through a port-forward to one of its pods\nmeshfed status --context hub-cluster --namespace meshfed",
		"# In CI: exit 0 once east and west are live and synced, 1 after five minutes\nmeshfed status --wait --clusters east,west --timeout 5m",
		"# What /debug/clusters says, for jq\nmeshfed status -o json | jq '.clusters[] | select(.state != \"live\") | .id'",
	},
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed status", stderr)
	o := statusFlags(fs)
	statusHelp.Install(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	return o.run(ctx, explicit, stdout, stderr)
}

// run is meshfed status with o; explicit names the flags given.
func (o *statusOptions) run(ctx context.Context, explicit map[string]bool, stdout, stderr io.Writer) error {
	switch o.output {
	case "table", "json", "yaml":
	default:
		return fmt.Errorf("--output %q: want table, json or yaml", o.output)
	}
	want, err := parseClusterList(o.clusters)
	if err != nil {
		return err
	}
	connect, err := o.hub.connector(explicit, stderr)
	if err != nil {
		return err
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = statusTimeout
		if o.wait {
			timeout = waitTimeout
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if o.wait {
		return waitForClusters(ctx, connect, want, o.interval, timeout, func(s *hubStatus) error { return o.print(stdout, s) }, stderr)
	}
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.close()
	s, err := conn.status(ctx, false)
	if err != nil {
		return err
	}
	if err := o.print(stdout, s); err != nil {
		return err
	}
	if len(want) > 0 {
		if waiting := notReady(s, want, time.Now()); len(waiting) > 0 {
			return fmt.Errorf("not live and synced: %s", strings.Join(waiting, ", "))
		}
	}
	return nil
}

// print writes the hub's answer in o's format: JSON and YAML as the hub
// served it (fields this build does not know included).
func (o *statusOptions) print(w io.Writer, s *hubStatus) error {
	switch o.output {
	case "json":
		var out bytes.Buffer
		if err := json.Indent(&out, s.raw, "", "  "); err != nil {
			return fmt.Errorf("the hub's answer: %w", err)
		}
		out.WriteByte('\n')
		_, err := w.Write(out.Bytes())
		return err
	case "yaml":
		out, err := yaml.JSONToYAML(s.raw)
		if err != nil {
			return fmt.Errorf("the hub's answer: %w", err)
		}
		_, err = w.Write(out)
		return err
	default:
		return printStatus(w, s.clusters, time.Now())
	}
}

// parseClusterList parses --clusters.
func parseClusterList(s string) ([]federation.ClusterID, error) {
	if s == "" {
		return nil, nil
	}
	var out []federation.ClusterID
	for id := range strings.SplitSeq(s, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			return nil, fmt.Errorf("--clusters %q: an empty cluster ID", s)
		}
		if !slices.Contains(out, federation.ClusterID(id)) {
			out = append(out, federation.ClusterID(id))
		}
	}
	return out, nil
}

// printStatus writes the clusters as a table, then what an operator must
// act on. Columns are only ever added, at the end: scripts read them.
func printStatus(w io.Writer, body debug.ClustersResponse, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNETWORK\tCONNECTED\tSTATE\tSINCE\tVERSION\tSERVICES\tENDPOINTS\tWORKLOADS\tLAST ACK\tREFUSED\tBUILD\tGATEWAYS\tNACKS\tLAG")
	for _, c := range body.Clusters {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t%s\n",
			c.ID, orDash(c.Network), c.Connected, c.State, age(c.StateSince, now, "-"), c.ShardVersion,
			c.Services, c.Endpoints, c.Workloads, age(c.LastAck, now, "never"), c.PolicyRefusals, orDash(c.Build),
			c.Gateways, c.Nacks, lag(c.LastChangeObservedAt, c.LastChangeAt))
	}
	if len(body.Clusters) == 0 {
		fmt.Fprintln(tw, "(no clusters have connected)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// What an operator must act on, below the table: the reason of the
	// last rejected update, which names the object and field.
	for _, c := range body.Clusters {
		if c.Duplicate != "" {
			fmt.Fprintf(w, "%s: %s\n", c.ID, c.Duplicate)
		}
		if c.LastNackReason != "" {
			fmt.Fprintf(w, "%s: update rejected %s: %s\n", c.ID, age(c.LastNack, now, "-"), c.LastNackReason)
		}
	}
	return nil
}

// age says how long ago t was, or none when t is unset.
func age(t, now time.Time, none string) string {
	if t.IsZero() {
		return none
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// lag is how long a change took from the spoke observing it to the hub
// applying it, or "-" when no change has arrived since the hub started.
// The two times come from two clocks: a lag below zero means the spoke's
// clock is ahead of the hub's by at least that much.
func lag(observed, applied time.Time) string {
	if observed.IsZero() || applied.IsZero() {
		return "-"
	}
	d := applied.Sub(observed)
	switch a := d.Abs(); {
	case a < time.Millisecond:
		return "<1ms" // and no µ for a terminal to mangle
	case a < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case a < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
