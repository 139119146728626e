package pki

import (
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation"
)

func TestWriteLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := WriteLocal(dir, td, []string{"east", "west"}, epoch); err != nil {
		t.Fatalf("WriteLocal: %v", err)
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"ca.crt", "ca.key", "east.crt", "east.key", "hub.crt", "hub.key", "west.crt", "west.key"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("files (-want +got):\n%s", diff)
	}
	for _, name := range names {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		wantPerm := os.FileMode(0o644)
		if filepath.Ext(name) == ".key" {
			wantPerm = 0o600
		}
		if got := info.Mode().Perm(); got != wantPerm {
			t.Errorf("%s: mode %v, want %v", name, got, wantPerm)
		}
	}

	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca, err := LoadCA(read("ca.crt"), read("ca.key"))
	if err != nil {
		t.Fatalf("LoadCA(ca.crt, ca.key): %v", err)
	}
	if ca.TrustDomain() != td {
		t.Errorf("CA trust domain %q, want %q", ca.TrustDomain(), td)
	}
	roots := x509.NewCertPool()
	roots.AddCert(parseCert(t, read("ca.crt")))

	tests := []struct {
		name    string
		wantURI string
		wantDNS []string
		wantIPs []net.IP
	}{
		{name: "hub", wantURI: federation.HubSPIFFEID(td).String(), wantDNS: []string{"localhost"}, wantIPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}},
		{name: "east", wantURI: federation.ClusterSPIFFEID(td, "east").String()},
		{name: "west", wantURI: federation.ClusterSPIFFEID(td, "west").String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := loadKeyPair(filepath.Join(dir, tt.name+".crt"), filepath.Join(dir, tt.name+".key"), nil, time.Now); err != nil {
				t.Fatalf("key pair: %v", err)
			}
			cert := parseCert(t, read(tt.name+".crt"))
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: epoch, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Errorf("does not verify against ca.crt: %v", err)
			}
			if diff := cmp.Diff([]string{tt.wantURI}, urisOf(cert)); diff != "" {
				t.Errorf("URI SANs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDNS, cert.DNSNames); diff != "" {
				t.Errorf("DNS SANs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantIPs, cert.IPAddresses, cmp.Comparer(net.IP.Equal)); diff != "" {
				t.Errorf("IP SANs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteLocalInvalid(t *testing.T) {
	tests := []struct {
		name     string
		clusters []string
	}{
		{name: "not a DNS label", clusters: []string{"East"}},
		{name: "empty", clusters: []string{""}},
		{name: "hub", clusters: []string{"hub"}},
		{name: "ca", clusters: []string{"east", "ca"}},
		{name: "twice", clusters: []string{"east", "west", "east"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			err := WriteLocal(dir, td, tt.clusters, epoch)
			if !errors.Is(err, federation.ErrInvalid) {
				t.Errorf("WriteLocal(%q) error = %v, want one wrapping %v", tt.clusters, err, federation.ErrInvalid)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("WriteLocal(%q) failed but wrote %d files", tt.clusters, len(entries))
			}
		})
	}
}

func TestWriteLocalReplaces(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		if err := WriteLocal(dir, td, []string{"east"}, epoch); err != nil {
			t.Fatalf("WriteLocal: %v", err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(entries, func(e os.DirEntry) bool { return filepath.Ext(e.Name()) != ".crt" && filepath.Ext(e.Name()) != ".key" }); i >= 0 {
		t.Errorf("left behind %s", entries[i].Name())
	}
}
