package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// reloadInterval bounds how often a handshake looks at the key pair files.
const reloadInterval = 5 * time.Second

// keyPair is a certificate and key loaded from two PEM files and re-read
// when either file changes. The check runs inside the handshake callbacks,
// at most once per reloadInterval, so no goroutine watches the files.
type keyPair struct {
	certFile, keyFile string
	logger            *slog.Logger
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   pairStamp // of the files cert was loaded from
	checked time.Time // when the files were last looked at
}

// pairStamp identifies the versions of the two files. Rotation by
// cert-manager or the kubelet (a symlink swap) changes the target's
// modification time; the size catches filesystems with coarse timestamps.
type pairStamp struct {
	certMod, keyMod   int64 // modification time, ns since the epoch
	certSize, keySize int64
}

func loadKeyPair(certFile, keyFile string, logger *slog.Logger, now func() time.Time) (*keyPair, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	kp := &keyPair{certFile: certFile, keyFile: keyFile, logger: logger, now: now}
	cert, stamp, err := kp.load()
	if err != nil {
		return nil, err
	}
	kp.cert, kp.stamp, kp.checked = cert, stamp, now()
	return kp, nil
}

// load reads the pair, taking the stamp first: a file replaced after the
// stat is seen as changed, and read again, at the next check.
func (kp *keyPair) load() (*tls.Certificate, pairStamp, error) {
	stamp, err := kp.statFiles()
	if err != nil {
		return nil, pairStamp{}, err
	}
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		return nil, pairStamp{}, fmt.Errorf("load key pair %s, %s: %w", kp.certFile, kp.keyFile, err)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, pairStamp{}, fmt.Errorf("load key pair %s: %w", kp.certFile, err)
		}
	}
	return &cert, stamp, nil
}

func (kp *keyPair) statFiles() (pairStamp, error) {
	c, err := os.Stat(kp.certFile)
	if err != nil {
		return pairStamp{}, fmt.Errorf("load key pair: %w", err)
	}
	k, err := os.Stat(kp.keyFile)
	if err != nil {
		return pairStamp{}, fmt.Errorf("load key pair: %w", err)
	}
	return pairStamp{
		certMod: c.ModTime().UnixNano(), keyMod: k.ModTime().UnixNano(),
		certSize: c.Size(), keySize: k.Size(),
	}, nil
}

// current returns the pair to present, first reloading it if the check
// interval has passed and the files changed. A failed reload is logged and
// leaves the previous pair in use; it is retried at the next check.
func (kp *keyPair) current() *tls.Certificate {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	now := kp.now()
	if now.Sub(kp.checked) < reloadInterval {
		return kp.cert
	}
	kp.checked = now
	stamp, err := kp.statFiles()
	if err == nil && stamp == kp.stamp {
		return kp.cert
	}
	var cert *tls.Certificate
	if err == nil {
		cert, stamp, err = kp.load()
	}
	if err != nil {
		kp.logger.Warn("TLS key pair reload failed, keeping the previous one",
			"cert", kp.certFile, "key", kp.keyFile, "notAfter", kp.cert.Leaf.NotAfter, "err", err)
		return kp.cert
	}
	kp.cert, kp.stamp = cert, stamp
	kp.logger.Info("TLS key pair reloaded",
		"cert", kp.certFile, "key", kp.keyFile, "serial", cert.Leaf.SerialNumber, "notAfter", cert.Leaf.NotAfter)
	return kp.cert
}

func (kp *keyPair) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return kp.current(), nil
}

func (kp *keyPair) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return kp.current(), nil
}
