package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation"
)

const td = "meshfed.test"

var epoch = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

// newTestCA mints a CA for td valid for a day from now.
func newTestCA(t *testing.T, now time.Time) *CA {
	t.Helper()
	ca, err := NewCA(td, now, 24*time.Hour)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("want exactly one PEM certificate, got block %v and %d trailing bytes", block, len(rest))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return cert
}

func TestNewCA(t *testing.T) {
	ca := newTestCA(t, epoch)
	cert := parseCert(t, ca.CertPEM())

	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("IsCA = %v, KeyUsage = %v: want a CA that signs certificates", cert.IsCA, cert.KeyUsage)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if diff := cmp.Diff([]string{"spiffe://" + td}, urisOf(cert)); diff != "" {
		t.Errorf("URI SANs (-want +got):\n%s", diff)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T: want ECDSA P-256", cert.PublicKey)
	}
	if !cert.NotAfter.Equal(epoch.Add(24*time.Hour)) || cert.NotBefore.After(epoch) {
		t.Errorf("valid %v to %v: want from at most %v to %v", cert.NotBefore, cert.NotAfter, epoch, epoch.Add(24*time.Hour))
	}
	if got := ca.TrustDomain(); got != td {
		t.Errorf("TrustDomain() = %q, want %q", got, td)
	}
}

func TestNewCAInvalid(t *testing.T) {
	tests := []struct {
		name        string
		trustDomain string
		validity    time.Duration
	}{
		{name: "empty trust domain", trustDomain: "", validity: time.Hour},
		{name: "upper case", trustDomain: "Meshfed.test", validity: time.Hour},
		{name: "port", trustDomain: "meshfed.test:443", validity: time.Hour},
		{name: "path", trustDomain: "meshfed.test/x", validity: time.Hour},
		{name: "zero validity", trustDomain: td, validity: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCA(tt.trustDomain, epoch, tt.validity)
			if !errors.Is(err, federation.ErrInvalid) {
				t.Errorf("NewCA(%q, %v) error = %v, want one wrapping %v", tt.trustDomain, tt.validity, err, federation.ErrInvalid)
			}
		})
	}
}

func TestIssue(t *testing.T) {
	ca := newTestCA(t, epoch)
	roots := x509.NewCertPool()
	roots.AddCert(parseCert(t, ca.CertPEM()))

	tests := []struct {
		name     string
		id       *url.URL
		dnsNames []string
		ips      []net.IP
	}{
		{name: "hub", id: federation.HubSPIFFEID(td), dnsNames: []string{"localhost", "hub.meshfed.svc"}, ips: []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}},
		{name: "cluster", id: federation.ClusterSPIFFEID(td, "east")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.Issue(tt.id, tt.dnsNames, tt.ips, epoch, time.Hour)
			if err != nil {
				t.Fatalf("Issue: %v", err)
			}
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				t.Fatalf("certificate and key do not match: %v", err)
			}
			cert := parseCert(t, certPEM)
			if diff := cmp.Diff([]string{tt.id.String()}, urisOf(cert)); diff != "" {
				t.Errorf("URI SANs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.dnsNames, cert.DNSNames); diff != "" {
				t.Errorf("DNS SANs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.ips, cert.IPAddresses, cmp.Comparer(net.IP.Equal)); diff != "" {
				t.Errorf("IP SANs (-want +got):\n%s", diff)
			}
			if cert.IsCA {
				t.Error("leaf is a CA")
			}
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: epoch, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("verify for usage %v: %v", usage, err)
				}
			}
		})
	}
}

func TestIssueInvalid(t *testing.T) {
	ca := newTestCA(t, epoch)
	tests := []struct {
		name     string
		id       *url.URL
		validity time.Duration
	}{
		{name: "no id", id: nil, validity: time.Hour},
		{name: "not spiffe", id: &url.URL{Scheme: "https", Host: td, Path: "/meshfed/hub"}, validity: time.Hour},
		{name: "other trust domain", id: federation.HubSPIFFEID("other.test"), validity: time.Hour},
		{name: "trust domain itself", id: &url.URL{Scheme: "spiffe", Host: td}, validity: time.Hour},
		{name: "query", id: &url.URL{Scheme: "spiffe", Host: td, Path: "/meshfed/hub", RawQuery: "a=b"}, validity: time.Hour},
		{name: "zero validity", id: federation.HubSPIFFEID(td), validity: 0},
		{name: "outlives the CA", id: federation.HubSPIFFEID(td), validity: 25 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ca.Issue(tt.id, nil, nil, epoch, tt.validity)
			if !errors.Is(err, federation.ErrInvalid) {
				t.Errorf("Issue(%v, validity %v) error = %v, want one wrapping %v", tt.id, tt.validity, err, federation.ErrInvalid)
			}
		})
	}
}

func TestLoadCA(t *testing.T) {
	orig := newTestCA(t, epoch)
	loaded, err := LoadCA(orig.CertPEM(), orig.keyPEM)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if got := loaded.TrustDomain(); got != td {
		t.Errorf("TrustDomain() = %q, want %q", got, td)
	}
	certPEM, _, err := loaded.Issue(federation.ClusterSPIFFEID(td, "west"), nil, nil, epoch, time.Hour)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(parseCert(t, orig.CertPEM()))
	if _, err := parseCert(t, certPEM).Verify(x509.VerifyOptions{Roots: roots, CurrentTime: epoch, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("certificate issued by the loaded CA does not verify against the original: %v", err)
	}

	leafPEM, leafKey, err := orig.Issue(federation.HubSPIFFEID(td), nil, nil, epoch, time.Hour)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	if _, err := LoadCA(leafPEM, leafKey); !errors.Is(err, federation.ErrInvalid) {
		t.Errorf("LoadCA(leaf) error = %v, want one wrapping %v", err, federation.ErrInvalid)
	}
	if _, err := LoadCA(orig.CertPEM(), leafKey); err == nil {
		t.Error("LoadCA with a key of another certificate succeeded")
	}
}

func urisOf(cert *x509.Certificate) []string {
	var out []string
	for _, u := range cert.URIs {
		out = append(out, u.String())
	}
	return out
}
