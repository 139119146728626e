package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"
)

// KeyPair is a certificate and its key, loaded from two PEM files and
// loaded again when either file changes (cert-manager rotation). The files
// are looked at when the pair is used, at most every few seconds; a pair
// that fails to load is logged and never replaces the one in use. It is
// safe for concurrent use.
type KeyPair struct {
	certFile, keyFile string
	r                 reloading[*tls.Certificate]
}

// LoadKeyPair loads the key pair in certFile and keyFile. Reloads, and
// failed ones, are logged to logger (nil discards).
func LoadKeyPair(certFile, keyFile string, logger *slog.Logger) (*KeyPair, error) {
	return loadKeyPair(certFile, keyFile, logger, time.Now)
}

func loadKeyPair(certFile, keyFile string, logger *slog.Logger, now func() time.Time) (*KeyPair, error) {
	logger = orDiscard(logger)
	kp := &KeyPair{certFile: certFile, keyFile: keyFile}
	kp.r = reloading[*tls.Certificate]{
		files: []string{certFile, keyFile},
		parse: kp.parse,
		now:   now,
		reloaded: func(cert *tls.Certificate) {
			logger.Info("TLS key pair reloaded",
				"cert", certFile, "key", keyFile, "serial", cert.Leaf.SerialNumber, "notAfter", cert.Leaf.NotAfter)
		},
		failed: func(kept *tls.Certificate, err error) {
			logger.Warn("TLS key pair reload failed, keeping the previous one",
				"cert", certFile, "key", keyFile, "notAfter", kept.Leaf.NotAfter, "err", err)
		},
	}
	if err := kp.r.init(); err != nil {
		return nil, fmt.Errorf("load key pair %s, %s: %w", certFile, keyFile, err)
	}
	return kp, nil
}

func (kp *KeyPair) parse() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parse %s: %w", kp.certFile, err)
		}
	}
	return &cert, nil
}

// current returns the pair to present, reloaded first if it is due.
func (kp *KeyPair) current() *tls.Certificate { return kp.r.current() }

// Leaf returns the certificate in use, reloaded first if it is due.
func (kp *KeyPair) Leaf() *x509.Certificate { return kp.current().Leaf }

// NotAfter returns when the certificate in use expires.
func (kp *KeyPair) NotAfter() time.Time { return kp.Leaf().NotAfter }

func (kp *KeyPair) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return kp.current(), nil
}

func (kp *KeyPair) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return kp.current(), nil
}
