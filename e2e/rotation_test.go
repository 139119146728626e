//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/pki"
)

// TestProcessCARotation rotates the federation CA under a running hub and
// spoke, the way docs/certificates.md says: an overlapping bundle first,
// then key pairs of the new CA, then the new CA alone. The spoke's stream
// never drops; a spoke that joins mid-rotation with a certificate of the
// new CA is admitted; at the end a certificate of the old CA is refused.
func TestProcessCARotation(t *testing.T) {
	const td = "cluster.local"
	dir := t.TempDir()
	now := time.Now()
	if err := pki.WriteLocal(dir, td, []string{"east", "west", "north"}, now); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(name string, data []byte) {
		t.Helper()
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	oldCA := read("ca.crt")
	// The spokes trust their own copy of the bundle, as each cluster does.
	write("spoke-ca.crt", oldCA)

	h := &procHub{federation: freeAddr(t), xds: freeAddr(t), debug: freeAddr(t)}
	h.process = startProcess(t, "hub", "hub", "--id", "hub-rotation",
		"--federation-addr", h.federation, "--xds-addr", h.xds, "--debug-addr", h.debug,
		"--tls-cert", filepath.Join(dir, "hub.crt"), "--tls-key", filepath.Join(dir, "hub.key"), "--tls-ca", filepath.Join(dir, "ca.crt"),
		"--xds-warmup", "0s")
	_, port, _ := net.SplitHostPort(h.federation)
	spoke := func(id string) *process {
		pod := startBackend(t, "127.0.8."+map[string]string{"east": "1", "west": "2", "north": "3"}[id], id)
		mdir := t.TempDir()
		if err := os.WriteFile(filepath.Join(mdir, "echo.yaml"), []byte(echoManifests("z-"+id, pod)), 0o644); err != nil {
			t.Fatal(err)
		}
		return startProcess(t, "spoke-"+id, "spoke", "--cluster-id", id, "--network", "n1",
			"--hub", "localhost:"+port, "--manifests", mdir,
			"--tls-cert", filepath.Join(dir, id+".crt"), "--tls-key", filepath.Join(dir, id+".key"), "--tls-ca", filepath.Join(dir, "spoke-ca.crt"))
	}
	east := spoke("east")
	first := h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })

	// 1. Both sides trust old and new CA.
	newCA, err := pki.NewCA(td, now.Truncate(time.Second), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bundle := slices.Concat(oldCA, newCA.CertPEM())
	write("ca.crt", bundle)
	write("spoke-ca.crt", bundle)

	// 2. Key pairs of the new CA: the hub's, then west's, which joins now.
	issue := func(name string, id string, dns []string, ips []net.IP) {
		t.Helper()
		cert, key, err := newCA.Issue(federation.ClusterSPIFFEID(td, federation.ClusterID(id)), dns, ips, now.Truncate(time.Second), time.Hour)
		if name == "hub" {
			cert, key, err = newCA.Issue(federation.HubSPIFFEID(td), dns, ips, now.Truncate(time.Second), time.Hour)
		}
		if err != nil {
			t.Fatal(err)
		}
		write(name+".key", key)
		write(name+".crt", cert)
	}
	issue("hub", "", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	issue("west", "west", nil, nil)
	issue("east", "east", nil, nil)
	spoke("west")
	h.waitCluster(t, "west", time.Minute, func(c clusterRow) bool { return c.connected && c.version > 0 })

	// 3. The new CA alone. North still holds a certificate of the old one.
	write("ca.crt", newCA.CertPEM())
	write("spoke-ca.crt", newCA.CertPEM())
	north := spoke("north")
	if !pollUntil(time.Minute, func() bool {
		line := h.metricLine(t, `meshfed_hub_tls_handshake_failures_total{listener="federation",reason="unknown_authority"}`)
		return line != "" && !strings.HasSuffix(line, " 0")
	}) {
		t.Errorf("north's certificate of the retired CA was never refused at the handshake")
	}
	for _, c := range h.clusters(t.Context()) {
		if c.id == "north" {
			t.Errorf("north, whose certificate is of the retired CA, joined: %+v", c)
		}
	}
	north.kill()

	// East's stream, opened under the old CA, never dropped.
	row := h.waitCluster(t, "east", time.Second, func(clusterRow) bool { return true })
	if !row.connected || row.session != first.session || row.peer != first.peer {
		t.Errorf("east after the rotation: %+v; want the stream it had before (%+v)", row, first)
	}
	// (It may have retried before its first stream, while the hub started.)
	log, _ := os.ReadFile(east.log)
	_, since, _ := strings.Cut(string(log), "connected to hub")
	if strings.Count(since, "connected to hub") != 0 || strings.Contains(since, "reconnecting") {
		t.Errorf("east's spoke reconnected during the rotation:\n%s", east.tail())
	}
	for _, series := range []string{`meshfed_hub_certificate_expiry_timestamp_seconds{role="federation"}`, `meshfed_hub_certificate_expiry_timestamp_seconds{role="ca"}`, "meshfed_build_info{"} {
		if h.metricLine(t, series) == "" {
			t.Errorf("the hub's /metrics has no %s", series)
		}
	}
	// Restarted, east dials with its new key pair and the new CA only.
	east.restart()
	h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.connected && c.peer != first.peer })
}
