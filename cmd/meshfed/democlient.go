package main

import (
	"context"
	"encoding/json"
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

// runDemoClient is a proxyless gRPC client that finds echo through the
// hub's xDS server alone and prints which cluster answers each call.
func runDemoClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed demo client", stderr)
	xdsAddr := fs.String("xds-addr", "127.0.0.1:15010", "the hub's xDS address")
	target := fs.String("target", "xds:///echo.demo.svc.cluster.local:8080", "the service to call")
	cluster := fs.String("cluster", "east", "the cluster this client runs in (node metadata CLUSTER_ID)")
	network := fs.String("network", "network-east", "the client's network (node metadata NETWORK)")
	region := fs.String("region", "us-east1", "the client's region")
	zone := fs.String("zone", "us-east1-a", "the client's zone")
	interval := fs.Duration("interval", 500*time.Millisecond, "time between calls")
	count := fs.Int("count", 0, "stop after this many calls (0: until Ctrl-C)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bootstrap, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      *xdsAddr,
			"channel_creds":   []any{map[string]string{"type": "insecure"}},
			"server_features": []string{"ignore_resource_deletion"},
		}},
		"node": map[string]any{
			"id":       "demo-client-" + *cluster,
			"locality": map[string]string{"region": *region, "zone": *zone},
			"metadata": map[string]string{"CLUSTER_ID": *cluster, "NETWORK": *network},
		},
	})
	if err != nil {
		return err
	}
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		return fmt.Errorf("xds resolver: %w", err)
	}
	conn, err := grpc.NewClient(*target, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	client := healthpb.NewHealthClient(conn)
	fmt.Fprintf(stdout, "calling %s through the hub at %s as a client in %s (%s, %s/%s)\n", *target, *xdsAddr, *cluster, *network, *region, *zone)

	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for n := 1; *count == 0 || n <= *count; n++ {
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
