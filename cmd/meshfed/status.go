package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshfed/meshfed/hub/debug"
	"github.com/meshfed/meshfed/internal/cli"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed status", stderr)
	addr := fs.String("debug-addr", "127.0.0.1:8080", "the hub's debug address")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/clusters", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ask the hub at %s: %w", *addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ask the hub at %s: %s", *addr, resp.Status)
	}
	var body debug.ClustersResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("read the hub's answer: %w", err)
	}
	return printStatus(stdout, body, time.Now())
}

func printStatus(w io.Writer, body debug.ClustersResponse, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNETWORK\tCONNECTED\tSTATE\tSINCE\tVERSION\tSERVICES\tENDPOINTS\tWORKLOADS\tLAST ACK\tREFUSED\tBUILD")
	for _, c := range body.Clusters {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n",
			c.ID, orDash(c.Network), c.Connected, c.State, age(c.StateSince, now, "-"), c.ShardVersion,
			c.Services, c.Endpoints, c.Workloads, age(c.LastAck, now, "never"), c.PolicyRefusals, orDash(c.Build))
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
