package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/internal/echo"
)

type demoClientOptions struct {
	xdsAddr, target, cluster, network, region, zone string
	interval                                        time.Duration
	count                                           int
}

func demoClientFlags(fs *flag.FlagSet) *demoClientOptions {
	o := &demoClientOptions{}
	fs.StringVar(&o.xdsAddr, "xds-addr", "127.0.0.1:15010", "the hub's xDS address")
	fs.StringVar(&o.target, "target", "xds:///echo.demo.svc.cluster.local:8080", "the service to call")
	fs.StringVar(&o.cluster, "cluster", "east", "the cluster this client runs in (node metadata CLUSTER_ID)")
	fs.StringVar(&o.network, "network", "network-east", "the client's network (node metadata NETWORK)")
	fs.StringVar(&o.region, "region", "us-east1", "the client's region")
	fs.StringVar(&o.zone, "zone", "us-east1-a", "the client's zone")
	fs.DurationVar(&o.interval, "interval", 500*time.Millisecond, "time between calls")
	fs.IntVar(&o.count, "count", 0, "stop after this many calls (0: until Ctrl-C)")
	return o
}

var demoClientHelp = cli.Help{
	Summary: "Call the demo's echo as a proxyless gRPC client that knows nothing but the hub's xDS address,\n" +
		"printing which cluster answers each call and through which address.",
	Groups: []cli.FlagGroup{
		{Title: "The client", Flags: []string{"xds-addr", "target", "cluster", "network", "region", "zone"}},
		{Title: "Calls", Flags: []string{"interval", "count"}},
	},
	Examples: []string{
		"meshfed demo client",
		"# A client in west, ten calls\nmeshfed demo client --cluster west --network network-west --region us-west1 --zone us-west1-a --count 10",
	},
}

// runDemoClient is a proxyless gRPC client that finds echo through the
// hub's xDS server alone and prints which cluster answers each call.
func runDemoClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed demo client", stderr)
	o := demoClientFlags(fs)
	demoClientHelp.Install(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	bootstrap, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      o.xdsAddr,
			"channel_creds":   []any{map[string]string{"type": "insecure"}},
			"server_features": []string{"ignore_resource_deletion"},
		}},
		"node": map[string]any{
			"id":       "demo-client-" + o.cluster,
			"locality": map[string]string{"region": o.region, "zone": o.zone},
			"metadata": map[string]string{"CLUSTER_ID": o.cluster, "NETWORK": o.network},
		},
	})
	if err != nil {
		return err
	}
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		return fmt.Errorf("xds resolver: %w", err)
	}
	conn, err := grpc.NewClient(o.target, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	client := healthpb.NewHealthClient(conn)
	fmt.Fprintf(stdout, "calling %s through the hub at %s as a client in %s (%s, %s/%s)\n", o.target, o.xdsAddr, o.cluster, o.network, o.region, o.zone)

	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for n := 1; o.count == 0 || n <= o.count; n++ {
		var md metadata.MD
		var p peer.Peer
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		_, err := client.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.Header(&md), grpc.Peer(&p), grpc.WaitForReady(true))
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(stdout, "call %d: %v\n", n, err)
		default:
			answered := "?"
			if v := md.Get(echo.HeaderKey); len(v) > 0 {
				answered = v[0]
			}
			fmt.Fprintf(stdout, "call %d: answered by %-5s via %-18s %6.2f ms\n", n, answered, p.Addr, float64(time.Since(start).Microseconds())/1000)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}
