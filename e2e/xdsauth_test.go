//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/spoke/shard"
)

// TestXDSAuthMutualTLS: a hub whose xDS port requires client certificates
// (--xds-tls-cert, --xds-tls-key, --xds-tls-ca) serves grpc-go's xDS client
// with a certificate of its CA and shows the client's identity in
// /debug/proxies; a client without a certificate gets nothing, and one
// that claims a cluster of another trust domain is refused.
func TestXDSAuthMutualTLS(t *testing.T) {
	certs := t.TempDir()
	if err := pki.WriteLocal(certs, "cluster.local", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	client := issueWorkload(t, certs, "client", "spiffe://cluster.local/ns/demo/sa/client")

	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.XDSCertFile, cfg.XDSKeyFile = filepath.Join(certs, "hub.crt"), filepath.Join(certs, "hub.key")
	cfg.XDSCAFile = filepath.Join(certs, "ca.crt")
	h, err := hub.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, h.Run)
	f := &xdsFleet{hub: h, trackers: map[string]tracker{}}
	f.cluster(t, "east", "net1", "z-east", nil, startBackend(t, "127.0.0.36", "east"))
	// West's workloads are in a trust domain of their own.
	west := newTracker()
	west.Update(time.Now(), true, func(w shard.Writer) {
		w.SetCluster(&federationpb.Cluster{Id: "west", Network: "net-west", TrustDomain: "west.example"})
	})
	runUplink(t, "west", west, (&killableDialer{client: federationClient(t, h.FederationAddr().String())}).dial)
	// West is known before any proxy asks: the hub takes a cluster the
	// clusterset does not know to be in its own trust domain.
	await(t, h.Registry(), "west's trust domain", func(s clusterset.Snapshot) bool {
		c, ok := s.Cluster("west")
		return ok && c.TrustDomain == "west.example"
	})

	xdsAddr := "localhost:" + portOf(h.XDSAddr().String())
	bootstrap := func(nodeID, cluster, creds string) string {
		return fmt.Sprintf(`{
			"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "tls", "config": {%s}}],
			  "server_features": ["ignore_resource_deletion"]}],
			"node": {"id": %q, "locality": {"region": "r-east", "zone": "z-east"}, "metadata": {"CLUSTER_ID": %q}}
		}`, xdsAddr, creds, nodeID, cluster)
	}
	caFile := fmt.Sprintf(`"ca_certificate_file": %q`, filepath.Join(certs, "ca.crt"))
	withCert := fmt.Sprintf(`%s, "certificate_file": %q, "private_key_file": %q`, caFile, client.cert, client.key)

	// With a certificate of the CA: served, under its identity.
	eventually(t, xdsClientWith(t, bootstrap("mtls-client", "east", withCert)), "east")
	if got := proxyIdentities(t, h.DebugAddr().String()); got["mtls-client"] != "spiffe://cluster.local/ns/demo/sa/client" {
		t.Errorf("/debug/proxies identities %v, want mtls-client's spiffe://cluster.local/ns/demo/sa/client", got)
	}

	// Without one: the handshake fails, and grpc-go's xDS client never
	// learns of a backend.
	anonymous := xdsClientWith(t, bootstrap("anonymous", "east", caFile))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := anonymous.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err == nil {
		t.Error("a client without a certificate reached a backend")
	}
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(certs, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(ca)
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "localhost"}
	if _, err := firstCDS(t, xdsAddr, noCert, "anonymous-ads", "east"); status.Code(err) != codes.Unavailable {
		t.Errorf("an ADS stream without a certificate ended with %v, want Unavailable (no handshake)", err)
	}

	// With one, claiming west, whose workloads are in another trust domain.
	withKey, err := pki.ClientConfig(client.cert, client.key, filepath.Join(certs, "ca.crt"), "localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = firstCDS(t, xdsAddr, withKey, "claims-west", "west")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"west.example"`) {
		t.Errorf("a stream claiming west ended with %v, want PermissionDenied naming west's trust domain", err)
	}
	if n, err := firstCDS(t, xdsAddr, withKey, "claims-east", "east"); err != nil || n == 0 {
		t.Errorf("the same identity claiming east: %d clusters, %v; want them", n, err)
	}
	got := proxyIdentities(t, h.DebugAddr().String())
	for _, refused := range []string{"anonymous", "anonymous-ads", "claims-west"} {
		if _, ok := got[refused]; ok {
			t.Errorf("/debug/proxies lists %s, which was refused", refused)
		}
	}
}

// workloadCert is a certificate and key file pair.
type workloadCert struct{ cert, key string }

// issueWorkload issues a certificate for SPIFFE ID id by the CA in dir,
// into dir/name.crt and dir/name.key.
func issueWorkload(t *testing.T, dir, name, id string) workloadCert {
	t.Helper()
	caCert, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(u, nil, nil, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w := workloadCert{cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(w.cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// firstCDS opens a delta ADS stream over TLS as node nodeID of cluster,
// open until the test ends, asks for every cluster, and returns how many
// the first response has, or the error that ended the stream.
func firstCDS(t *testing.T, addr string, cfg *tls.Config, nodeID, cluster string) (int, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	md, _ := structpb.NewStruct(map[string]any{"CLUSTER_ID": cluster})
	err = s.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: nodeID, Metadata: md}, TypeUrl: resourcev3.ClusterType})
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	r, err := s.Recv()
	return len(r.GetResources()), err
}

// proxyIdentities reads /debug/proxies: node ID → identity.
func proxyIdentities(t *testing.T, debugAddr string) map[string]string {
	t.Helper()
	var body struct {
		Proxies []struct {
			ID       string `json:"id"`
			Identity string `json:"identity"`
		} `json:"proxies"`
	}
	getJSON(t, "http://"+debugAddr+"/debug/proxies", &body)
	out := map[string]string{}
	for _, p := range body.Proxies {
		out[p.ID] = p.Identity
	}
	return out
}
