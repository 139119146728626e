package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/meshfed/meshfed/federation"
)

// clockSkew backdates NotBefore so that a certificate minted on one machine
// is already valid on a peer whose clock is slightly behind.
const clockSkew = 5 * time.Minute

// CA is a certificate authority for one SPIFFE trust domain. It is safe for
// concurrent use.
type CA struct {
	trustDomain string
	cert        *x509.Certificate
	certPEM     []byte
	keyPEM      []byte
	key         crypto.Signer
}

// NewCA mints a self-signed CA for trustDomain with an ECDSA P-256 key. Its
// only URI SAN is the trust domain's SPIFFE ID, spiffe://<trustDomain>.
func NewCA(trustDomain string, now time.Time, validity time.Duration) (*CA, error) {
	if err := validateTrustDomain(trustDomain); err != nil {
		return nil, err
	}
	if validity <= 0 {
		return nil, fmt.Errorf("%w: CA validity %v is not positive", federation.ErrInvalid, validity)
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("CA for trust domain %q: %w", trustDomain, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("CA for trust domain %q: %w", trustDomain, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"meshfed"}, CommonName: "meshfed CA " + trustDomain},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: trustDomain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("CA for trust domain %q: create certificate: %w", trustDomain, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA for trust domain %q: parse certificate: %w", trustDomain, err)
	}
	return &CA{
		trustDomain: trustDomain,
		cert:        cert,
		certPEM:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:      keyPEM,
		key:         key,
	}, nil
}

// LoadCA loads a CA from PEM: a CA certificate whose first URI SAN is a
// trust domain's SPIFFE ID (spiffe://<trust domain>) and its private key
// (PKCS #8, SEC 1 or PKCS #1).
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cert := pair.Leaf
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%w: load CA: certificate %q is not a CA", federation.ErrInvalid, cert.Subject)
	}
	if len(cert.URIs) == 0 || cert.URIs[0].Scheme != "spiffe" {
		return nil, fmt.Errorf("%w: load CA: certificate %q has no spiffe:// URI SAN naming its trust domain", federation.ErrInvalid, cert.Subject)
	}
	td := cert.URIs[0].Host
	if err := validateTrustDomain(td); err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: load CA: private key %T cannot sign", federation.ErrInvalid, pair.PrivateKey)
	}
	return &CA{
		trustDomain: td,
		cert:        cert,
		certPEM:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		keyPEM:      keyPEM,
		key:         key,
	}, nil
}

// TrustDomain returns the SPIFFE trust domain the CA issues for.
func (ca *CA) TrustDomain() string { return ca.trustDomain }

// CertPEM returns the CA certificate, PEM-encoded: the trust bundle peers
// verify against.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Issue mints a leaf certificate for the SPIFFE ID id, which must be in the
// CA's trust domain, with an ECDSA P-256 key. The leaf carries id as its
// only URI SAN, the given DNS and IP SANs, and both the server and client
// authentication extended key usages. It may not outlive the CA.
func (ca *CA) Issue(id *url.URL, dnsNames []string, ips []net.IP, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := ca.checkID(id); err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	switch {
	case validity <= 0:
		return nil, nil, fmt.Errorf("%w: issue %s: validity %v is not positive", federation.ErrInvalid, id, validity)
	case notAfter.After(ca.cert.NotAfter):
		return nil, nil, fmt.Errorf("%w: issue %s: certificate would expire at %v, after its CA (%v)", federation.ErrInvalid, id, notAfter, ca.cert.NotAfter)
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s: %w", id, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s: %w", id, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"meshfed"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s: create certificate: %w", id, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// checkID accepts a SPIFFE ID of a workload in the CA's trust domain.
func (ca *CA) checkID(id *url.URL) error {
	switch {
	case id == nil:
		return fmt.Errorf("%w: issue: no SPIFFE ID", federation.ErrInvalid)
	case id.Scheme != "spiffe" || id.User != nil || id.Port() != "" || id.RawQuery != "" || id.Fragment != "" || id.Opaque != "":
		return fmt.Errorf("%w: issue: %q is not a SPIFFE ID", federation.ErrInvalid, id)
	case id.Host != ca.trustDomain:
		return fmt.Errorf("%w: issue: %s is not in trust domain %q", federation.ErrInvalid, id, ca.trustDomain)
	case id.Path == "" || id.Path == "/":
		return fmt.Errorf("%w: issue: %s names the trust domain, not a workload", federation.ErrInvalid, id)
	}
	return nil
}

// validateTrustDomain checks a SPIFFE trust domain name: lower-case
// letters, digits, '.', '-' and '_'.
func validateTrustDomain(td string) error {
	if td == "" || len(td) > 255 {
		return fmt.Errorf("%w: trust domain %q: want 1 to 255 characters", federation.ErrInvalid, td)
	}
	if i := strings.IndexFunc(td, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '.' && r != '-' && r != '_'
	}); i >= 0 {
		return fmt.Errorf("%w: trust domain %q: character %q: want lower-case letters, digits, '.', '-' or '_'", federation.ErrInvalid, td, td[i])
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// newSerial returns a random 128-bit serial number (RFC 5280 allows up to
// 20 octets; CAs are asked for at least 64 bits of randomness).
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial, nil
}
