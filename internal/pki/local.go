package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/meshfed/meshfed/federation"
)

// localValidity is how long UpdateLocal's CA and certificates are valid
// (a certificate issued by an older CA: until the CA expires).
const localValidity = 365 * 24 * time.Hour

// LocalConfig is the throwaway PKI [UpdateLocal] keeps in a directory.
type LocalConfig struct {
	// Dir holds the files (created if missing).
	Dir string
	// TrustDomain is the identities' SPIFFE trust domain.
	TrustDomain string
	// Clusters are the cluster IDs to hold spoke certificates for.
	Clusters []string
	// Force mints a new CA and issues every certificate again, even when
	// Dir already holds a CA.
	Force bool
}

// Validate checks the trust domain and the cluster IDs.
func (c LocalConfig) Validate() error {
	if err := validateTrustDomain(c.TrustDomain); err != nil {
		return err
	}
	return checkLocalClusters(c.TrustDomain, c.Clusters)
}

// LocalResult is what [UpdateLocal] did: the key pairs ("ca", "hub" and
// cluster IDs, each the base name of a .crt and a .key file) it wrote, and
// those it kept as they were.
type LocalResult struct {
	Written, Kept []string
}

// WriteLocal is [UpdateLocal] without Force.
func WriteLocal(dir, trustDomain string, clusters []string, now time.Time) error {
	_, err := UpdateLocal(LocalConfig{Dir: dir, TrustDomain: trustDomain, Clusters: clusters}, now)
	return err
}

// UpdateLocal keeps a throwaway CA and the certificates it signed in
// cfg.Dir:
//   - ca.crt, ca.key: the CA;
//   - hub.crt, hub.key: the hub's identity, with DNS SAN localhost and IP
//     SANs 127.0.0.1 and ::1;
//   - <cluster>.crt, <cluster>.key for each cluster: that cluster's spoke
//     identity.
//
// A CA already in the directory is kept, and so is each certificate it
// holds: only the missing ones are issued, by that CA, so that what was
// deployed from the directory keeps working. A CA certificate without its
// key (or one that does not load, or is for another trust domain), or a
// certificate that does not verify against the CA, is an error wrapping
// [ErrLocalFiles]; nothing is written then. cfg.Force starts over: a new CA,
// and every certificate issued again, which invalidates every certificate
// of the previous CA.
//
// Keys are written with mode 0600, certificates 0644, each file atomically
// (so a process reloading them never reads half a file). It is meant for
// demos and local development, not production.
func UpdateLocal(cfg LocalConfig, now time.Time) (LocalResult, error) {
	if err := cfg.Validate(); err != nil {
		return LocalResult{}, err
	}
	// Certificates store whole seconds: a CA valid until now+validity
	// (truncated) cannot sign a leaf valid until now+validity (not truncated).
	now = now.Truncate(time.Second)
	var res LocalResult
	type pair struct {
		name      string
		cert, key []byte
	}
	var pairs []pair
	ca, err := existingCA(cfg, now)
	switch {
	case err != nil:
		return LocalResult{}, err
	case ca != nil:
		res.Kept = append(res.Kept, "ca")
	default:
		if ca, err = NewCA(cfg.TrustDomain, now, localValidity); err != nil {
			return LocalResult{}, err
		}
		pairs = append(pairs, pair{name: "ca", cert: ca.CertPEM(), key: ca.keyPEM})
		res.Written = append(res.Written, "ca")
	}
	validity := min(localValidity, ca.cert.NotAfter.Sub(now))

	type identity struct {
		name string
		id   *url.URL
		dns  []string
		ips  []net.IP
	}
	idents := []identity{{
		name: "hub", id: federation.HubSPIFFEID(cfg.TrustDomain),
		dns: []string{"localhost"}, ips: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}}
	for _, c := range cfg.Clusters {
		idents = append(idents, identity{name: c, id: federation.ClusterSPIFFEID(cfg.TrustDomain, federation.ClusterID(c))})
	}
	for _, ident := range idents {
		if !cfg.Force {
			kept, err := existingLeaf(cfg.Dir, ident.name, ca, ident.id, now)
			if err != nil {
				return LocalResult{}, err
			}
			if kept {
				res.Kept = append(res.Kept, ident.name)
				continue
			}
		}
		cert, key, err := ca.Issue(ident.id, ident.dns, ident.ips, now, validity)
		if err != nil {
			return LocalResult{}, err
		}
		pairs = append(pairs, pair{name: ident.name, cert: cert, key: key})
		res.Written = append(res.Written, ident.name)
	}

	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return LocalResult{}, fmt.Errorf("write local certificates: %w", err)
	}
	for _, p := range pairs {
		// Key first: a reader that sees the new certificate also finds its key.
		if err := writeFileAtomic(filepath.Join(cfg.Dir, p.name+".key"), p.key, 0o600); err != nil {
			return LocalResult{}, err
		}
		if err := writeFileAtomic(filepath.Join(cfg.Dir, p.name+".crt"), p.cert, 0o644); err != nil {
			return LocalResult{}, err
		}
	}
	return res, nil
}

// existingCA returns the CA in cfg.Dir, or nil if there is none (or
// cfg.Force discards it).
func existingCA(cfg LocalConfig, now time.Time) (*CA, error) {
	if cfg.Force {
		return nil, nil
	}
	certFile, keyFile := filepath.Join(cfg.Dir, "ca.crt"), filepath.Join(cfg.Dir, "ca.key")
	certPEM, keyPEM, err := readPair(certFile, keyFile)
	if err != nil || certPEM == nil {
		return nil, err
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s, %s: %w", ErrLocalFiles, certFile, keyFile, err)
	}
	switch {
	case ca.TrustDomain() != cfg.TrustDomain:
		return nil, fmt.Errorf("%w: %s is the CA of trust domain %q, not %q", ErrLocalFiles, certFile, ca.TrustDomain(), cfg.TrustDomain)
	case !now.Before(ca.cert.NotAfter):
		return nil, fmt.Errorf("%w: %s expired at %v", ErrLocalFiles, certFile, ca.cert.NotAfter)
	}
	return ca, nil
}

// existingLeaf reports whether dir holds name's key pair, and checks that
// it is one ca issued for id and still valid.
func existingLeaf(dir, name string, ca *CA, id *url.URL, now time.Time) (bool, error) {
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	certPEM, keyPEM, err := readPair(certFile, keyFile)
	if err != nil || certPEM == nil {
		return false, err
	}
	fail := func(err error) (bool, error) {
		return false, fmt.Errorf("%w: %s: %w (remove it and its key to issue it again)", ErrLocalFiles, certFile, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err == nil && pair.Leaf == nil { // GODEBUG=x509keypairleaf=0
		pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0])
	}
	if err != nil {
		return fail(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fail(fmt.Errorf("does not verify against the CA: %w", err))
	}
	if err := CheckSPIFFEID(pair.Leaf, id); err != nil {
		return fail(err)
	}
	return true, nil
}

// readPair reads a certificate and its key; both nil if neither exists.
func readPair(certFile, keyFile string) (certPEM, keyPEM []byte, err error) {
	certPEM, certErr := os.ReadFile(certFile)
	keyPEM, keyErr := os.ReadFile(keyFile)
	switch certMissing, keyMissing := errors.Is(certErr, fs.ErrNotExist), errors.Is(keyErr, fs.ErrNotExist); {
	case certMissing && keyMissing:
		return nil, nil, nil
	case certMissing:
		return nil, nil, fmt.Errorf("%w: %s exists without %s", ErrLocalFiles, keyFile, certFile)
	case keyMissing:
		return nil, nil, fmt.Errorf("%w: %s exists without %s", ErrLocalFiles, certFile, keyFile)
	case certErr != nil:
		return nil, nil, fmt.Errorf("%w: %w", ErrLocalFiles, certErr)
	case keyErr != nil:
		return nil, nil, fmt.Errorf("%w: %w", ErrLocalFiles, keyErr)
	}
	return certPEM, keyPEM, nil
}

// checkLocalClusters rejects cluster names that are no valid cluster IDs,
// repeat, or would overwrite the CA's or the hub's files.
func checkLocalClusters(trustDomain string, clusters []string) error {
	seen := make(map[string]bool, len(clusters))
	for _, c := range clusters {
		if _, _, err := federation.ClusterFromSPIFFEID(federation.ClusterSPIFFEID(trustDomain, federation.ClusterID(c))); err != nil {
			return fmt.Errorf("%w: cluster %q: %w", federation.ErrInvalid, c, err)
		}
		if c == "ca" || c == "hub" {
			return fmt.Errorf("%w: cluster %q: the name is reserved for the CA's and the hub's files", federation.ErrInvalid, c)
		}
		if seen[c] {
			return fmt.Errorf("%w: cluster %q: listed twice", federation.ErrInvalid, c)
		}
		seen[c] = true
	}
	return nil
}

// writeFileAtomic writes data to a temporary file next to name and renames
// it over name.
func writeFileAtomic(name string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
