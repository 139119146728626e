package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	xdsserver "github.com/meshfed/meshfed/xds"
)

// startXDSHub runs a hub serving xDS with cluster east (one endpoint of
// demo/echo) and a gRPC client of east's network dialling echo through it.
func startXDSHub(t *testing.T) (debugAddr string) {
	t.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.XDSWarmUp = 50 * time.Millisecond
	h, err := hub.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	err = h.Registry().Connect("east", "").Apply("s", &federationpb.ShardUpdate{
		Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: "east", Network: "n1"},
		Services: []*federationpb.Service{{
			Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local", Type: federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
			Ports:  []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
			Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_LABEL},
		}},
		Endpoints: []*federationpb.Endpoint{{
			Namespace: "demo", Service: "echo", Address: "10.1.0.1", Ready: true, Serving: true,
			Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}},
			Locality: &federationpb.Locality{Region: "r1", Zone: "z1"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["ignore_resource_deletion"]}],
		"node": {"id": "client-1", "locality": {"region": "r1", "zone": "z1"}, "metadata": {"CLUSTER_ID": "east", "NETWORK": "n1"}}
	}`, h.XDSAddr().String())
	r, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///echo.demo.svc.cluster.local:8080", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	conn.Connect()
	return h.DebugAddr().String()
}

func meshfed(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(t.Context(), args, &out, io.Discard)
	return out.String(), err
}

func TestProxiesAndExplain(t *testing.T) {
	debug := startXDSHub(t)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := meshfed(t, "proxies", "--debug-addr", debug, "-o", "json")
		var resp struct{ Proxies []xdsserver.ProxyStatus }
		if err == nil && json.Unmarshal([]byte(out), &resp) == nil && len(resp.Proxies) == 1 &&
			resp.Proxies[0].Types["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"].State == xdsserver.StateSynced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client never synced its endpoints: %v\n%s", err, out)
		}
		<-tick.C
	}

	out, err := meshfed(t, "proxies", "--debug-addr", debug)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "PROXY") || !strings.Contains(lines[0], "EDS") {
		t.Fatalf("proxies:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[0] != "client-1" || f[1] != "grpc" || f[2] != "east" || f[3] != "n1" || !strings.Contains(lines[1], "SYNCED") {
		t.Errorf("the client's row: %q", lines[1])
	}
	// Filters.
	if out, _ := meshfed(t, "proxies", "--debug-addr", debug, "--cluster", "west"); strings.Contains(out, "client-1") {
		t.Errorf("--cluster west lists east's client:\n%s", out)
	}

	out, err = meshfed(t, "explain", "--debug-addr", debug, "--proxy", "client-1", "--service", "echo.demo.svc.cluster.local:8080", "--endpoint", "10.1.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ok  proxy", "ok  assignment", "10.1.0.1 at priority 0", "client-1 sees 10.1.0.1 of echo.demo.svc.cluster.local:8080"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	out, _ = meshfed(t, "explain", "--debug-addr", debug, "--proxy", "client-1", "--service", "nope.demo.svc.cluster.local")
	if !strings.Contains(out, "NO  service") || !strings.Contains(out, "does not see") {
		t.Errorf("explain of an unexported service:\n%s", out)
	}
	if _, err := meshfed(t, "explain", "--debug-addr", debug, "--proxy", "client-1"); err == nil || !strings.Contains(err.Error(), "--service") {
		t.Errorf("explain without --service: %v", err)
	}
}
