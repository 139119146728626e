package pki

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/meshfed/meshfed/federation"
)

// localValidity is how long WriteLocal's CA and certificates are valid.
const localValidity = 365 * 24 * time.Hour

// WriteLocal mints a throwaway CA for trustDomain and writes, into dir
// (created if missing):
//   - ca.crt, ca.key: the CA;
//   - hub.crt, hub.key: the hub's identity, with DNS SAN localhost and IP
//     SANs 127.0.0.1 and ::1;
//   - <cluster>.crt, <cluster>.key for each cluster: that cluster's spoke
//     identity.
//
// Keys are written with mode 0600, certificates 0644, each file atomically
// (so a process reloading them never reads half a file). Existing files are
// replaced: a new CA invalidates every certificate of the previous one.
// It is meant for demos and local development, not production.
func WriteLocal(dir, trustDomain string, clusters []string, now time.Time) error {
	if err := checkLocalClusters(trustDomain, clusters); err != nil {
		return err
	}
	// Certificates store whole seconds: a CA valid until now+validity
	// (truncated) cannot sign a leaf valid until now+validity (not truncated).
	now = now.Truncate(time.Second)
	ca, err := NewCA(trustDomain, now, localValidity)
	if err != nil {
		return err
	}
	type pair struct {
		name      string
		cert, key []byte
	}
	pairs := []pair{{name: "ca", cert: ca.CertPEM(), key: ca.keyPEM}}
	hubCert, hubKey, err := ca.Issue(federation.HubSPIFFEID(trustDomain), []string{"localhost"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, now, localValidity)
	if err != nil {
		return err
	}
	pairs = append(pairs, pair{name: "hub", cert: hubCert, key: hubKey})
	for _, c := range clusters {
		cert, key, err := ca.Issue(federation.ClusterSPIFFEID(trustDomain, federation.ClusterID(c)), nil, nil, now, localValidity)
		if err != nil {
			return err
		}
		pairs = append(pairs, pair{name: c, cert: cert, key: key})
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write local certificates: %w", err)
	}
	for _, p := range pairs {
		// Key first: a reader that sees the new certificate also finds its key.
		if err := writeFileAtomic(filepath.Join(dir, p.name+".key"), p.key, 0o600); err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(dir, p.name+".crt"), p.cert, 0o644); err != nil {
			return err
		}
	}
	return nil
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
