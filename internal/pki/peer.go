package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"

	"github.com/meshfed/meshfed/federation"
)

// PeerSPIFFEID returns the SPIFFE ID of the peer of a handshake: the URI SAN
// of its verified leaf certificate. As an X.509 SVID, the leaf must carry
// exactly one URI SAN and it must be a spiffe:// URI with a trust domain.
// Errors wrap [federation.ErrBadIdentity].
func PeerSPIFFEID(state tls.ConnectionState) (*url.URL, error) {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil, fmt.Errorf("%w: peer presented no verified certificate", federation.ErrBadIdentity)
	}
	return spiffeID(state.VerifiedChains[0][0], "peer certificate")
}

// CheckSPIFFEID checks that cert, one's own certificate, is an X.509 SVID
// for want: a process started with the certificate of another identity
// would otherwise be refused by its peers, again and again, for a reason
// only their logs tell. Errors wrap [federation.ErrBadIdentity].
func CheckSPIFFEID(cert *x509.Certificate, want *url.URL) error {
	got, err := spiffeID(cert, "certificate")
	if err != nil {
		return err
	}
	if got.String() != want.String() {
		return fmt.Errorf("%w: the certificate's identity is %s, want %s", federation.ErrBadIdentity, got, want)
	}
	return nil
}

// spiffeID returns the SPIFFE ID of an X.509 SVID: its only URI SAN. what
// names the certificate in errors.
func spiffeID(leaf *x509.Certificate, what string) (*url.URL, error) {
	switch n := len(leaf.URIs); {
	case n == 0:
		return nil, fmt.Errorf("%w: %s %x has no URI SAN", federation.ErrBadIdentity, what, leaf.SerialNumber)
	case n > 1:
		return nil, fmt.Errorf("%w: %s %x has %d URI SANs, want one SPIFFE ID", federation.ErrBadIdentity, what, leaf.SerialNumber, n)
	}
	id := leaf.URIs[0]
	if id.Scheme != "spiffe" || id.Host == "" {
		return nil, fmt.Errorf("%w: %s %x: URI SAN %q is not a SPIFFE ID", federation.ErrBadIdentity, what, leaf.SerialNumber, id)
	}
	return id, nil
}
