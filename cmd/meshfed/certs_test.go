package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// certs runs `meshfed certs` with args and returns what it printed.
func certs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(t.Context(), append([]string{"certs"}, args...), &out, io.Discard)
	return out.String(), err
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// verify reports whether the certificate in certFile verifies against the
// CA in caFile.
func verify(t *testing.T, certFile, caFile string) error {
	t.Helper()
	parse := func(name string) *x509.Certificate {
		t.Helper()
		block, _ := pem.Decode(readFile(t, name))
		if block == nil {
			t.Fatalf("%s: no PEM", name)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return cert
	}
	roots := x509.NewCertPool()
	roots.AddCert(parse(caFile))
	_, err := parse(certFile).Verify(x509.VerifyOptions{Roots: roots, CurrentTime: time.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// TestCertsKeepsCA runs `meshfed certs` twice, the second time with one
// more cluster: the CA and the first run's certificates are kept, and the
// output says which files were written and which kept.
func TestCertsKeepsCA(t *testing.T) {
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	out, err := certs(t, "--dir", dir, "--clusters", "east", "--trust-domain", "meshfed.test")
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	wantLines(t, out,
		"wrote "+file("ca.crt")+", "+file("ca.key")+": a new throwaway CA",
		"wrote "+file("hub.crt")+", "+file("hub.key"),
		"wrote "+file("east.crt")+", "+file("east.key"))
	ca, east := readFile(t, file("ca.crt")), readFile(t, file("east.crt"))

	out, err = certs(t, "--dir", dir, "--clusters", "east,west", "--trust-domain", "meshfed.test")
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	wantLines(t, out,
		"kept  "+file("ca.crt")+", "+file("ca.key"),
		"kept  "+file("hub.crt")+", "+file("hub.key"),
		"kept  "+file("east.crt")+", "+file("east.key"),
		"wrote "+file("west.crt")+", "+file("west.key"))
	if !bytes.Equal(ca, readFile(t, file("ca.crt"))) {
		t.Error("ca.crt changed")
	}
	if !bytes.Equal(east, readFile(t, file("east.crt"))) {
		t.Error("east.crt changed")
	}
	for _, name := range []string{"hub.crt", "east.crt", "west.crt"} {
		if err := verify(t, file(name), file("ca.crt")); err != nil {
			t.Errorf("%s does not verify against ca.crt: %v", name, err)
		}
	}
}

// TestCertsForce starts over with a new CA: the previous certificates no
// longer verify.
func TestCertsForce(t *testing.T) {
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	if _, err := certs(t, "--dir", dir, "--clusters", "east"); err != nil {
		t.Fatal(err)
	}
	oldCA := filepath.Join(t.TempDir(), "old-ca.crt")
	if err := os.WriteFile(oldCA, readFile(t, file("ca.crt")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := certs(t, "--dir", dir, "--clusters", "east", "--force")
	if err != nil {
		t.Fatalf("--force: %v", err)
	}
	wantLines(t, out, "wrote "+file("ca.crt")+", "+file("ca.key")+": a new throwaway CA (--force: certificates of any previous CA no longer verify)")
	if bytes.Equal(readFile(t, oldCA), readFile(t, file("ca.crt"))) {
		t.Error("ca.crt was kept")
	}
	if err := verify(t, file("east.crt"), file("ca.crt")); err != nil {
		t.Errorf("east.crt does not verify against the new CA: %v", err)
	}
	if err := verify(t, file("east.crt"), oldCA); err == nil {
		t.Error("east.crt verifies against the replaced CA")
	}
}

// TestCertsRefusesCAWithoutKey: a CA certificate without its key is an
// error (a new CA would orphan what the old one signed), and nothing is
// written.
func TestCertsRefusesCAWithoutKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs(t, "--dir", dir, "--clusters", "east"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	_, err := certs(t, "--dir", dir, "--clusters", "east,west")
	if err == nil || !strings.Contains(err.Error(), "ca.crt exists without") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("error %v, want one saying ca.crt has no key and pointing to --force", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "west.crt")); err == nil {
		t.Error("west.crt written despite the error")
	}
}

// TestSpokeRefusesCertificateOfAnotherCluster starts a spoke for west with
// east's certificate: it exits at once with an error naming both.
func TestSpokeRefusesCertificateOfAnotherCluster(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs(t, "--dir", dir, "--clusters", "east"); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	err := run(t.Context(), []string{
		"spoke", "--cluster-id", "west", "--network", "net-a", "--hub", "127.0.0.1:1", "--manifests", t.TempDir(),
		"--tls-cert", file("east.crt"), "--tls-key", file("east.key"), "--tls-ca", file("ca.crt"), "--debug-addr", "",
	}, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("the spoke started")
	}
	for _, want := range []string{`--cluster-id "west"`, "spiffe://cluster.local/meshfed/cluster/east", "spiffe://cluster.local/meshfed/cluster/west"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
