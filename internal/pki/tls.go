package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// ServerConfig returns the hub's TLS configuration: TLS 1.3 at least, the
// key pair from certFile and keyFile, and client certificates required and
// verified against the CA bundle in caFile.
//
// The key pair is re-read when its files change, checked during handshakes
// at most every few seconds; a failed reload keeps the previous pair and is
// logged to logger (nil discards). The CA bundle is read once.
func ServerConfig(certFile, keyFile, caFile string, logger *slog.Logger) (*tls.Config, error) {
	kp, pool, err := load(certFile, keyFile, caFile, logger)
	if err != nil {
		return nil, fmt.Errorf("server TLS config: %w", err)
	}
	return serverConfig(kp, pool), nil
}

// ClientConfig returns a spoke's TLS configuration: TLS 1.3 at least, the
// client key pair from certFile and keyFile, and the server verified
// against the CA bundle in caFile and serverName. With serverName "", gRPC
// fills in the host of the dialled target.
//
// The key pair is reloaded as in [ServerConfig].
func ClientConfig(certFile, keyFile, caFile, serverName string, logger *slog.Logger) (*tls.Config, error) {
	kp, pool, err := load(certFile, keyFile, caFile, logger)
	if err != nil {
		return nil, fmt.Errorf("client TLS config: %w", err)
	}
	return clientConfig(kp, pool, serverName), nil
}

func serverConfig(kp *keyPair, pool *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: kp.getCertificate,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      pool,
	}
}

func clientConfig(kp *keyPair, pool *x509.CertPool, serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: kp.getClientCertificate,
		RootCAs:              pool,
		ServerName:           serverName,
	}
}

func load(certFile, keyFile, caFile string, logger *slog.Logger) (*keyPair, *x509.CertPool, error) {
	kp, err := loadKeyPair(certFile, keyFile, logger, time.Now)
	if err != nil {
		return nil, nil, err
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, nil, err
	}
	return kp, pool, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("load CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("load CA bundle %s: no PEM certificate found", caFile)
	}
	return pool, nil
}

// ServerOnlyConfig returns a TLS configuration that presents a key pair
// (reloaded as in [ServerConfig]) and asks clients for no certificate: for
// ports such as xDS where clients authenticate otherwise, or not at all.
func ServerOnlyConfig(certFile, keyFile string, logger *slog.Logger) (*tls.Config, error) {
	kp, err := loadKeyPair(certFile, keyFile, logger, time.Now)
	if err != nil {
		return nil, fmt.Errorf("server TLS config: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.getCertificate}, nil
}
