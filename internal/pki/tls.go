package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ServerConfig returns the hub's TLS configuration ([NewServerConfig]) for
// the key pair in certFile and keyFile and the CA bundle in caFile. Both
// are reloaded when their files change; failed reloads are logged to
// logger (nil discards).
func ServerConfig(certFile, keyFile, caFile string, logger *slog.Logger) (*tls.Config, error) {
	kp, cas, err := load(certFile, keyFile, caFile, logger)
	if err != nil {
		return nil, fmt.Errorf("server TLS config: %w", err)
	}
	return NewServerConfig(kp, cas), nil
}

// ClientConfig returns a spoke's TLS configuration ([NewClientConfig]) for
// the key pair in certFile and keyFile and the CA bundle in caFile,
// reloaded as in [ServerConfig].
func ClientConfig(certFile, keyFile, caFile, serverName string, logger *slog.Logger) (*tls.Config, error) {
	kp, cas, err := load(certFile, keyFile, caFile, logger)
	if err != nil {
		return nil, fmt.Errorf("client TLS config: %w", err)
	}
	return NewClientConfig(kp, cas, serverName), nil
}

// ServerOnlyConfig returns a TLS configuration ([NewServerOnlyConfig]) for
// the key pair in certFile and keyFile, reloaded as in [ServerConfig].
func ServerOnlyConfig(certFile, keyFile string, logger *slog.Logger) (*tls.Config, error) {
	kp, err := LoadKeyPair(certFile, keyFile, logger)
	if err != nil {
		return nil, fmt.Errorf("server TLS config: %w", err)
	}
	return NewServerOnlyConfig(kp), nil
}

func load(certFile, keyFile, caFile string, logger *slog.Logger) (*KeyPair, *Bundle, error) {
	kp, err := LoadKeyPair(certFile, keyFile, logger)
	if err != nil {
		return nil, nil, err
	}
	cas, err := LoadBundle(caFile, logger)
	if err != nil {
		return nil, nil, err
	}
	return kp, cas, nil
}

// NewServerConfig returns the hub's TLS configuration: TLS 1.3 at least,
// presenting kp, and client certificates required and verified against
// cas.
//
// Each handshake uses the bundle in use at its start: GetConfigForClient
// returns a copy of the returned configuration with ClientCAs set to it.
// grpc-go's credentials.NewTLS applies its defaults (the h2 ALPN protocol)
// to that copy too; other users that change a clone of the configuration
// must do the same.
func NewServerConfig(kp *KeyPair, cas *Bundle) *tls.Config {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: kp.getCertificate,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      cas.Pool(),
	}
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := cfg.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = cas.Pool()
		return c, nil
	}
	return cfg
}

// NewClientConfig returns a spoke's TLS configuration: TLS 1.3 at least,
// presenting kp, and the server's certificate verified against cas.
//
// The name verified is the handshake's server name, which gRPC fills in
// from the dialled target when the configuration has none, or else
// serverName. An IP address is never sent as a server name (SNI), so a
// server dialled by address is verified against serverName, which must then
// be set (to the address, or a name the server's certificate carries); with
// neither, the handshake fails.
//
// VerifyConnection verifies the chain against the bundle in use at each
// handshake, as crypto/tls would against RootCAs, which would pin the
// bundle of the moment the configuration was built. InsecureSkipVerify
// only turns crypto/tls's own check off; as a consequence the client's
// ConnectionState has no VerifiedChains.
func NewClientConfig(kp *KeyPair, cas *Bundle, serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: kp.getClientCertificate,
		ServerName:           serverName,
		InsecureSkipVerify:   true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, cas.Pool(), time.Now(), serverName)
		},
	}
}

// NewServerOnlyConfig returns a TLS configuration that presents kp and asks
// clients for no certificate: for ports such as xDS where clients
// authenticate otherwise, or not at all.
func NewServerOnlyConfig(kp *KeyPair) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.getCertificate}
}

// errNoServerName fails a handshake whose server's certificate there is no
// name to verify against.
var errNoServerName = errors.New("tls: no server name to verify the server's certificate against " +
	"(an IP address is not sent as a server name: configure the name or address to expect)")

// verifyServer verifies the server's chain as crypto/tls does for a
// client: against roots, at now, for the name of the handshake (or
// serverName), with the other certificates the server sent as
// intermediates and the server authentication extended key usage.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool, now time.Time, serverName string) error {
	name := cs.ServerName
	if name == "" {
		name = serverName
	}
	if name == "" {
		return errNoServerName
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: server presented no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		CurrentTime:   now,
		DNSName:       name,
		Intermediates: x509.NewCertPool(),
	}
	for _, cert := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(cert)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}
