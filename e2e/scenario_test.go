//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/debug"
	"github.com/meshfed/meshfed/internal/pki"
)

func TestScenarioTwoFileSpokes(t *testing.T) {
	f := startFleet(t)
	dir := copyDemo(t)
	f.startSpoke(t, "east", "network-east", filepath.Join(dir, "east"))
	f.startSpoke(t, "west", "network-west", filepath.Join(dir, "west"))
	reg := f.hub.Registry()

	s := await(t, reg, "both clusters' echo endpoints", func(s clusterset.Snapshot) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == 2 && len(endpointsOf(s, "demo/echo", "west")) == 2 &&
			s.ServiceCount() == 3
	})
	echo, _ := s.Service("demo/echo")
	if echo.ClustersetHostname != "echo.demo.svc.clusterset.local" || echo.Hostname != "echo.demo.svc.cluster.local" {
		t.Errorf("echo hostnames %q, %q", echo.Hostname, echo.ClustersetHostname)
	}
	for _, c := range echo.Clusters {
		for _, e := range c.Endpoints {
			if e.Cluster != c.Cluster || string(e.Network) != "network-"+string(c.Cluster) {
				t.Errorf("endpoint %s tagged cluster %s network %s, want %s and network-%s", e.GetAddress(), e.Cluster, e.Network, c.Cluster, c.Cluster)
			}
			if e.GetLocality().GetRegion() == "" || e.GetLocality().GetZone() == "" {
				t.Errorf("endpoint %s has no locality", e.GetAddress())
			}
		}
	}
	if _, ok := s.Service("demo/db"); ok {
		t.Error("demo/db is not exported but reached the hub")
	}
	for _, id := range []federation.ClusterID{"east", "west"} {
		c, ok := s.Cluster(id)
		if !ok || c.State != clusterset.Live || len(c.Gateways) == 0 {
			t.Errorf("cluster %s: %+v, want live with gateways", id, c)
		}
	}

	// Edit the manifests on disk: the registry follows.
	echoFile := filepath.Join(dir, "east", "echo.yaml")
	data, err := os.ReadFile(echoFile)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "  - addresses: [\"127.0.0.12\"]\n    conditions: {ready: true", "  - addresses: [\"127.0.0.12\"]\n    conditions: {ready: false", 1)
	if edited == string(data) {
		t.Fatal("the demo's east/echo.yaml no longer has the endpoint this test edits")
	}
	if err := os.WriteFile(echoFile, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "east", "others.yaml")); err != nil {
		t.Fatal(err)
	}
	await(t, reg, "east's edits", func(s clusterset.Snapshot) bool {
		v, ok := s.Service("demo/echo")
		if !ok {
			return false
		}
		for _, c := range v.Clusters {
			for _, e := range c.Endpoints {
				if e.GetAddress() == "127.0.0.12" && e.GetReady() {
					return false
				}
			}
		}
		_, frontend := s.Service("demo/frontend")
		return !frontend
	})

	// The debug endpoints show the same.
	var clusters debug.ClustersResponse
	getJSON(t, "http://"+f.hub.DebugAddr().String()+"/debug/clusters", &clusters)
	var ids []string
	for _, c := range clusters.Clusters {
		if c.Connected && c.LastAck.After(time.Time{}) {
			ids = append(ids, string(c.ID)+"/"+c.Network)
		}
	}
	if !slices.Equal(ids, []string{"east/network-east", "west/network-west"}) {
		t.Errorf("/debug/clusters lists %v connected, want east and west with their networks", ids)
	}
	var services debug.ServicesResponse
	getJSON(t, "http://"+f.hub.DebugAddr().String()+"/debug/services", &services)
	if len(services.Services) != 2 {
		t.Errorf("/debug/services lists %d services, want 2 (echo, payments)", len(services.Services))
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(getText(t, url)), v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

// TestSpoofedClusterIsRefused: a spoke holding east's certificate cannot
// publish west.
func TestSpoofedClusterIsRefused(t *testing.T) {
	f := startFleet(t)
	tlsCfg, err := pki.ClientConfig(filepath.Join(f.certs, "east.crt"), filepath.Join(f.certs, "east.key"),
		filepath.Join(f.certs, "ca.crt"), "localhost", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(f.hub.FederationAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	stream, err := federationpb.NewFederationClient(conn).Sync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hello := &federationpb.Hello{ClusterId: "west", Session: "spoof"}
	if err := stream.Send(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `bound to cluster "east"`) {
		t.Fatalf("the hub answered %v, want PermissionDenied naming east", err)
	}
	if st := f.hub.Registry().Status(); len(st) != 0 {
		t.Errorf("the registry knows %+v after a refused stream", st)
	}

	// Without a client certificate there is no stream at all.
	noCert, err := pki.ClientConfig(filepath.Join(f.certs, "east.crt"), filepath.Join(f.certs, "east.key"),
		filepath.Join(f.certs, "ca.crt"), "localhost", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	noCert.GetClientCertificate = nil
	noCert.Certificates = nil
	conn2, err := grpc.NewClient(f.hub.FederationAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(noCert)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn2.Close() }()
	s2, err := federationpb.NewFederationClient(conn2).Sync(t.Context())
	if err == nil {
		_ = s2.Send(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: hello}})
		_, err = s2.Recv()
	}
	if err == nil {
		t.Fatal("a client without a certificate opened a stream")
	}
}
