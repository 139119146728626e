package pki

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"
)

// Bundle is a trust bundle: the CA certificates in one PEM file, loaded
// again when the file changes, so that a CA can be rotated with overlap
// (old and new CA in the bundle, then the new one alone) without a
// restart. The file is looked at when the bundle is used, at most every
// few seconds; a bundle that fails to load is logged and never replaces the
// one in use. It is safe for concurrent use.
type Bundle struct {
	file string
	r    reloading[*trust]
}

// trust is one version of a bundle.
type trust struct {
	pool  *x509.CertPool
	certs []*x509.Certificate
	// notAfter is the earliest expiry of certs.
	notAfter time.Time
}

// LoadBundle loads the CA certificates in caFile. Reloads, and failed
// ones, are logged to logger (nil discards).
func LoadBundle(caFile string, logger *slog.Logger) (*Bundle, error) {
	return loadBundle(caFile, logger, time.Now)
}

func loadBundle(caFile string, logger *slog.Logger, now func() time.Time) (*Bundle, error) {
	logger = orDiscard(logger)
	b := &Bundle{file: caFile}
	b.r = reloading[*trust]{
		files: []string{caFile},
		parse: b.parse,
		now:   now,
		reloaded: func(t *trust) {
			logger.Info("CA bundle reloaded", "ca", caFile, "certificates", len(t.certs), "notAfter", t.notAfter)
		},
		failed: func(kept *trust, err error) {
			logger.Warn("CA bundle reload failed, keeping the previous one",
				"ca", caFile, "certificates", len(kept.certs), "notAfter", kept.notAfter, "err", err)
		},
	}
	if err := b.r.init(); err != nil {
		return nil, fmt.Errorf("load CA bundle %s: %w", caFile, err)
	}
	return b, nil
}

// parse reads every CERTIFICATE block of the file. Other blocks are
// skipped; a certificate that does not parse fails the whole bundle, so
// that a corrupt file is noticed rather than trusted in part.
func (b *Bundle) parse() (*trust, error) {
	rest, err := os.ReadFile(b.file)
	if err != nil {
		return nil, err
	}
	t := &trust{pool: x509.NewCertPool()}
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(t.certs)+1, err)
		}
		t.pool.AddCert(cert)
		t.certs = append(t.certs, cert)
		if t.notAfter.IsZero() || cert.NotAfter.Before(t.notAfter) {
			t.notAfter = cert.NotAfter
		}
	}
	if len(t.certs) == 0 {
		return nil, fmt.Errorf("no PEM certificate found in %s", b.file)
	}
	return t, nil
}

// Pool returns the pool of the bundle in use, reloaded first if it is due.
// The pool must not be modified.
func (b *Bundle) Pool() *x509.CertPool { return b.r.current().pool }

// Certificates returns the certificates of the bundle in use, reloaded
// first if it is due.
func (b *Bundle) Certificates() []*x509.Certificate { return slices.Clone(b.r.current().certs) }

// NotAfter returns when the first certificate of the bundle in use
// expires: from then on, what it signed no longer verifies.
func (b *Bundle) NotAfter() time.Time { return b.r.current().notAfter }
