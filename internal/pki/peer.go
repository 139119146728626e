package pki

import (
	"crypto/tls"
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
	leaf := state.VerifiedChains[0][0]
	switch n := len(leaf.URIs); {
	case n == 0:
		return nil, fmt.Errorf("%w: peer certificate %x has no URI SAN", federation.ErrBadIdentity, leaf.SerialNumber)
	case n > 1:
		return nil, fmt.Errorf("%w: peer certificate %x has %d URI SANs, want one SPIFFE ID", federation.ErrBadIdentity, leaf.SerialNumber, n)
	}
	id := leaf.URIs[0]
	if id.Scheme != "spiffe" || id.Host == "" {
		return nil, fmt.Errorf("%w: peer certificate %x: URI SAN %q is not a SPIFFE ID", federation.ErrBadIdentity, leaf.SerialNumber, id)
	}
	return id, nil
}
