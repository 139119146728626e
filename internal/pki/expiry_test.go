package pki

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshfed/meshfed/federation"
)

// TestExpiryCollector reports the expiry of the key pair in use and the
// earliest of the CA bundle, and follows a rotation.
func TestExpiryCollector(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	short, long := newTestCA(t, now), newTestCA(t, now.Add(time.Hour))
	bundleFile := filepath.Join(dir, "bundle.crt")
	writeTouched(t, bundleFile, slices.Concat(long.CertPEM(), short.CertPEM()))
	hub := writeIdentity(t, short, dir, "hub", federation.HubSPIFFEID(td))

	var clock fakeClock
	kp, err := loadKeyPair(hub.cert, hub.key, nil, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	cas, err := loadBundle(bundleFile, slog.New(slog.DiscardHandler), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	c := NewExpiryCollector("meshfed_hub", map[string]Expiring{"federation": kp, "ca": cas})
	const name = "meshfed_hub_certificate_expiry_timestamp_seconds"
	expect := func(t *testing.T, federation, ca time.Time) {
		t.Helper()
		want := fmt.Sprintf(`
# HELP %[1]s When the certificate in use expires (its NotAfter), in seconds since the Unix epoch; for a CA bundle, its first certificate to expire.
# TYPE %[1]s gauge
%[1]s{role="ca"} %[2]d
%[1]s{role="federation"} %[3]d
`, name, ca.Unix(), federation.Unix())
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), name); err != nil {
			t.Error(err)
		}
	}
	if n, err := testutil.CollectAndLint(c); err != nil || len(n) != 0 {
		t.Errorf("lint: %v %v", n, err)
	}

	expect(t, kp.Leaf().NotAfter, short.cert.NotAfter)

	// A key pair valid for longer than writeIdentity's, so that the
	// expiry moves by more than a second.
	certPEM, keyPEM, err := long.Issue(federation.HubSPIFFEID(td), nil, nil, now, 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writeTouched(t, hub.key, keyPEM)
	writeTouched(t, hub.cert, certPEM)
	writeTouched(t, bundleFile, long.CertPEM())
	expect(t, kp.Leaf().NotAfter, short.cert.NotAfter) // not yet checked again
	clock.advance(reloadInterval)
	expect(t, parseCert(t, certPEM).NotAfter, long.cert.NotAfter)
}
