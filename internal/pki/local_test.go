package pki

import (
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestUpdateLocalKeepsCA runs UpdateLocal twice on one directory, the
// second time with one more cluster: the CA and the certificates of the
// first run stay as they are, and the new cluster's is signed by that CA.
func TestUpdateLocalKeepsCA(t *testing.T) {
	dir := t.TempDir()
	res, err := UpdateLocal(LocalConfig{Dir: dir, TrustDomain: td, Clusters: []string{"east"}}, epoch)
	if err != nil {
		t.Fatalf("first UpdateLocal: %v", err)
	}
	if diff := cmp.Diff(LocalResult{Written: []string{"ca", "hub", "east"}}, res); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	first := readDir(t, dir)

	later := epoch.Add(30 * 24 * time.Hour)
	res, err = UpdateLocal(LocalConfig{Dir: dir, TrustDomain: td, Clusters: []string{"east", "west"}}, later)
	if err != nil {
		t.Fatalf("second UpdateLocal: %v", err)
	}
	if diff := cmp.Diff(LocalResult{Written: []string{"west"}, Kept: []string{"ca", "hub", "east"}}, res); diff != "" {
		t.Errorf("second run (-want +got):\n%s", diff)
	}
	second := readDir(t, dir)
	for name, b := range first {
		if !slices.Equal(b, second[name]) {
			t.Errorf("%s changed", name)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(parseCert(t, second["ca.crt"]))
	for _, name := range []string{"hub", "east", "west"} {
		if _, err := parseCert(t, second[name+".crt"]).Verify(x509.VerifyOptions{Roots: roots, CurrentTime: later, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s.crt does not verify against ca.crt: %v", name, err)
		}
	}
	// Issued a month later by a CA valid for a year: valid as long as the CA.
	if got, want := parseCert(t, second["west.crt"]).NotAfter, parseCert(t, second["ca.crt"]).NotAfter; !got.Equal(want) {
		t.Errorf("west.crt valid until %v, want until its CA's expiry %v", got, want)
	}
}

// TestUpdateLocalForce starts over with a new CA.
func TestUpdateLocalForce(t *testing.T) {
	dir := t.TempDir()
	cfg := LocalConfig{Dir: dir, TrustDomain: td, Clusters: []string{"east"}}
	if _, err := UpdateLocal(cfg, epoch); err != nil {
		t.Fatal(err)
	}
	first := readDir(t, dir)
	cfg.Force = true
	res, err := UpdateLocal(cfg, epoch)
	if err != nil {
		t.Fatalf("UpdateLocal with Force: %v", err)
	}
	if diff := cmp.Diff(LocalResult{Written: []string{"ca", "hub", "east"}}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	second := readDir(t, dir)
	for name := range first {
		if slices.Equal(first[name], second[name]) {
			t.Errorf("%s was kept", name)
		}
	}
	oldRoots := x509.NewCertPool()
	oldRoots.AddCert(parseCert(t, first["ca.crt"]))
	if _, err := parseCert(t, second["east.crt"]).Verify(x509.VerifyOptions{Roots: oldRoots, CurrentTime: epoch, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("the new east.crt verifies against the replaced CA")
	}
	if entries, _ := os.ReadDir(dir); slices.ContainsFunc(entries, func(e os.DirEntry) bool {
		return filepath.Ext(e.Name()) != ".crt" && filepath.Ext(e.Name()) != ".key"
	}) {
		t.Errorf("left temporary files behind: %v", entries)
	}
}

// TestUpdateLocalRefuses checks that a directory whose files do not fit
// together is an error, and is left as it is.
func TestUpdateLocalRefuses(t *testing.T) {
	other := t.TempDir()
	if err := WriteLocal(other, td, []string{"east"}, epoch); err != nil {
		t.Fatal(err)
	}
	otherFiles := readDir(t, other)
	tests := []struct {
		name   string
		modify func(t *testing.T, dir string)
		want   string // in the error
	}{
		{name: "CA certificate without its key", modify: remove("ca.key"), want: "ca.crt exists without"},
		{name: "CA key without its certificate", modify: remove("ca.crt"), want: "ca.key exists without"},
		{name: "CA key of another CA", modify: copyFrom(otherFiles, "ca.key"), want: "ca.crt"},
		{name: "CA certificate not PEM", modify: write("ca.crt", "not PEM"), want: "ca.crt"},
		{name: "cluster certificate of another CA", modify: copyFrom(otherFiles, "east.crt", "east.key"), want: "east.crt: does not verify against the CA"},
		{name: "cluster certificate without its key", modify: remove("east.key"), want: "east.crt exists without"},
		{name: "cluster key of another certificate", modify: copyFrom(otherFiles, "east.key"), want: "east.crt"},
		{name: "certificate of another identity", modify: func(t *testing.T, dir string) {
			t.Helper()
			files := readDir(t, dir)
			copyFrom(map[string][]byte{"east.crt": files["hub.crt"], "east.key": files["hub.key"]}, "east.crt", "east.key")(t, dir)
		}, want: "want spiffe://meshfed.test/meshfed/cluster/east"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteLocal(dir, td, []string{"east"}, epoch); err != nil {
				t.Fatal(err)
			}
			tt.modify(t, dir)
			before := readDir(t, dir)
			_, err := UpdateLocal(LocalConfig{Dir: dir, TrustDomain: td, Clusters: []string{"east", "west"}}, epoch)
			if !errors.Is(err, ErrLocalFiles) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("UpdateLocal error = %v, want one wrapping %v saying %q", err, ErrLocalFiles, tt.want)
			}
			if diff := cmp.Diff(before, readDir(t, dir)); diff != "" {
				t.Errorf("files changed (-before +after):\n%s", diff)
			}
			// Force starts over whatever the directory holds.
			if _, err := UpdateLocal(LocalConfig{Dir: dir, TrustDomain: td, Clusters: []string{"east"}, Force: true}, epoch); err != nil {
				t.Errorf("UpdateLocal with Force: %v", err)
			}
		})
	}

	t.Run("CA of another trust domain", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteLocal(dir, "other.test", nil, epoch); err != nil {
			t.Fatal(err)
		}
		if _, err := UpdateLocal(LocalConfig{Dir: dir, TrustDomain: td}, epoch); !errors.Is(err, ErrLocalFiles) || !strings.Contains(err.Error(), `"other.test"`) {
			t.Errorf("UpdateLocal error = %v, want one wrapping %v naming the CA's trust domain", err, ErrLocalFiles)
		}
	})
	t.Run("expired CA", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteLocal(dir, td, nil, epoch); err != nil {
			t.Fatal(err)
		}
		if _, err := UpdateLocal(LocalConfig{Dir: dir, TrustDomain: td}, epoch.Add(2*localValidity)); !errors.Is(err, ErrLocalFiles) || !strings.Contains(err.Error(), "expired") {
			t.Errorf("UpdateLocal error = %v, want one wrapping %v saying the CA expired", err, ErrLocalFiles)
		}
	})
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func remove(name string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		t.Helper()
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func write(name, data string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFrom(files map[string][]byte, names ...string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		t.Helper()
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}
