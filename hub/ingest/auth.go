package ingest

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/internal/pki"
)

// Authenticator returns the cluster a stream's credential is bound to. An
// empty ClusterID with a nil error means the credential binds no cluster
// (plaintext with --insecure) and the stream's claim is taken as is.
type Authenticator interface {
	Authenticate(ctx context.Context) (federation.ClusterID, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context) (federation.ClusterID, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context) (federation.ClusterID, error) {
	return f(ctx)
}

// Insecure trusts every stream's claimed cluster. Only for --insecure.
var Insecure Authenticator = AuthenticatorFunc(func(context.Context) (federation.ClusterID, error) { return "", nil })

// PeerCertificate binds a stream to the cluster in the SPIFFE ID of the
// peer's verified client certificate, spiffe://<trustDomain>/meshfed/cluster/<id>.
type PeerCertificate struct {
	TrustDomain string
}

var _ Authenticator = PeerCertificate{}

// Authenticate implements Authenticator.
func (a PeerCertificate) Authenticate(ctx context.Context) (federation.ClusterID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", errors.New("no peer in the stream's context")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", fmt.Errorf("peer %s did not connect over TLS", p.Addr)
	}
	id, err := pki.PeerSPIFFEID(info.State)
	if err != nil {
		return "", fmt.Errorf("peer %s: %w", p.Addr, err)
	}
	td, cluster, err := federation.ClusterFromSPIFFEID(id)
	if err != nil {
		return "", fmt.Errorf("peer %s: %w", p.Addr, err)
	}
	if td != a.TrustDomain {
		return "", fmt.Errorf("peer %s: identity %s is not in trust domain %q", p.Addr, id, a.TrustDomain)
	}
	return cluster, nil
}
