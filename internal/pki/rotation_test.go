package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation"
)

// echoServer accepts TLS connections with cfg and echoes what each one
// sends, until the test ends.
func echoServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(conn, conn) })
		}
	})
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String()
}

// dialEcho opens a TLS connection to addr and checks a round trip over it.
// In TLS 1.3 the server checks the client's certificate after the client
// finished its handshake: a refusal surfaces in the round trip.
func dialEcho(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := conn.(*tls.Conn)
	if err := roundTrip(tc); err != nil {
		_ = tc.Close()
		return nil, err
	}
	return tc, nil
}

func roundTrip(conn *tls.Conn) error {
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte{42}); err != nil {
		return err
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(conn, b); err != nil {
		return err
	}
	if b[0] != 42 {
		return errors.New("echo garbled")
	}
	return nil
}

// TestCARotation rotates the CA with overlap, as docs/certificates.md
// describes, over real connections: the bundle becomes old+new CA, the
// key pairs are reissued by the new CA, the bundle becomes the new CA
// alone. Every step accepts new handshakes; a connection opened before the
// rotation carries on throughout; at the end, certificates of the old CA
// are refused both ways.
func TestCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := newTestCA(t, time.Now()), newTestCA(t, time.Now())
	bundle := filepath.Join(dir, "bundle.crt")
	writeTouched(t, bundle, oldCA.CertPEM())
	ids := map[string]*url.URL{"hub": federation.HubSPIFFEID(td), "east": federation.ClusterSPIFFEID(td, "east")}
	files := map[string]identity{}
	for name, id := range ids {
		files[name] = writeIdentity(t, oldCA, dir, name, id)
	}
	// Left as they are: what a peer that missed the rotation presents.
	staleHub := writeIdentity(t, oldCA, dir, "stale-hub", ids["hub"])
	staleEast := writeIdentity(t, oldCA, dir, "stale-east", ids["east"])
	// Ahead of the rotation: a spoke already reissued by the new CA.
	earlyEast := writeIdentity(t, newCA, dir, "early-east", ids["east"])

	// The hub and the spoke each load the bundle, as separate processes
	// would; their reloads are driven by one fake clock.
	var clock fakeClock
	logs := &recorder{}
	load := func(f identity, logger *slog.Logger) (*KeyPair, *Bundle) {
		t.Helper()
		kp, err := loadKeyPair(f.cert, f.key, logger, clock.now)
		if err != nil {
			t.Fatal(err)
		}
		cas, err := loadBundle(bundle, logger, clock.now)
		if err != nil {
			t.Fatal(err)
		}
		return kp, cas
	}
	hubKP, hubCAs := load(files["hub"], slog.New(logs))
	eastKP, eastCAs := load(files["east"], nil)
	hubAddr := echoServer(t, NewServerConfig(hubKP, hubCAs))
	east := NewClientConfig(eastKP, eastCAs, "localhost")
	// client returns a spoke presenting f that trusts the spoke's bundle.
	client := func(f identity) *tls.Config {
		kp, err := LoadKeyPair(f.cert, f.key, nil)
		if err != nil {
			t.Fatal(err)
		}
		return NewClientConfig(kp, eastCAs, "localhost")
	}
	// server returns the address of a hub presenting f that trusts the
	// hub's bundle.
	server := func(f identity) string {
		kp, err := LoadKeyPair(f.cert, f.key, nil)
		if err != nil {
			t.Fatal(err)
		}
		return echoServer(t, NewServerConfig(kp, hubCAs))
	}
	mustConnect := func(t *testing.T, addr string, cfg *tls.Config) *tls.Conn {
		t.Helper()
		conn, err := dialEcho(t, addr, cfg)
		if err != nil {
			t.Fatalf("handshake refused: %v", err)
		}
		return conn
	}
	connect := func(t *testing.T, addr string, cfg *tls.Config) *big.Int {
		t.Helper()
		conn := mustConnect(t, addr, cfg)
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	refused := func(t *testing.T, addr string, cfg *tls.Config) {
		t.Helper()
		if conn, err := dialEcho(t, addr, cfg); err == nil {
			_ = conn.Close()
			t.Fatal("handshake succeeded, want it refused")
		}
	}
	step := func() { clock.advance(reloadInterval) }

	longLived := mustConnect(t, hubAddr, east)
	defer func() { _ = longLived.Close() }()
	oldHubSerial := hubKP.Leaf().SerialNumber

	t.Run("before", func(t *testing.T) {
		connect(t, hubAddr, east)
		refused(t, hubAddr, client(earlyEast))
	})

	t.Run("bundle of both CAs", func(t *testing.T) {
		writeTouched(t, bundle, slices.Concat(oldCA.CertPEM(), newCA.CertPEM()))
		step()
		if got := connect(t, hubAddr, east); got.Cmp(oldHubSerial) != 0 {
			t.Errorf("hub presented serial %x, want the old %x", got, oldHubSerial)
		}
		connect(t, hubAddr, client(earlyEast))
		connect(t, hubAddr, client(staleEast))
	})

	t.Run("key pairs from the new CA", func(t *testing.T) {
		for _, name := range []string{"hub", "east"} {
			files[name] = writeIdentity(t, newCA, dir, name, ids[name])
		}
		step()
		got := connect(t, hubAddr, east)
		if want := hubKP.Leaf(); got.Cmp(want.SerialNumber) != 0 || got.Cmp(oldHubSerial) == 0 {
			t.Errorf("hub presented serial %x, want the reissued %x", got, want.SerialNumber)
		}
		if err := hubKP.Leaf().CheckSignatureFrom(newCA.cert); err != nil {
			t.Errorf("the hub's key pair is not the new CA's: %v", err)
		}
		// A peer still on the old CA is accepted while the bundle has it.
		connect(t, hubAddr, client(staleEast))
		connect(t, server(staleHub), east)
	})

	t.Run("bundle of the new CA", func(t *testing.T) {
		writeTouched(t, bundle, newCA.CertPEM())
		step()
		connect(t, hubAddr, east)
		connect(t, hubAddr, client(earlyEast))
		refused(t, hubAddr, client(staleEast))
		refused(t, server(staleHub), east)
	})

	if err := roundTrip(longLived); err != nil {
		t.Errorf("the connection opened before the rotation: %v", err)
	}
	if got := longLived.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(oldHubSerial) != 0 {
		t.Errorf("the connection opened before the rotation has the hub's serial %x, want the old %x", got, oldHubSerial)
	}
	want := []string{
		"INFO CA bundle reloaded",
		"INFO TLS key pair reloaded",
		"INFO CA bundle reloaded",
	}
	if diff := cmp.Diff(want, logs.messages()); diff != "" {
		t.Errorf("hub logs (-want +got):\n%s", diff)
	}
}

// TestBundleReload checks that a bundle is read again only when its file
// changed and the check interval passed, and that a file that cannot be
// read, or holds no certificate, keeps the last good bundle.
func TestBundleReload(t *testing.T) {
	dir := t.TempDir()
	first, second, third := newTestCA(t, time.Now()), newTestCA(t, time.Now()), newTestCA(t, time.Now())
	file := filepath.Join(dir, "bundle.crt")
	writeTouched(t, file, first.CertPEM())
	var clock fakeClock
	logs := &recorder{}
	b, err := loadBundle(file, slog.New(logs), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	serials := func() []string {
		var out []string
		for _, c := range b.Certificates() {
			out = append(out, c.SerialNumber.String())
		}
		return out
	}
	serial := func(ca *CA) string { return ca.cert.SerialNumber.String() }

	steps := []struct {
		name    string
		write   func()
		advance bool
		want    []*CA
	}{
		{name: "loaded", want: []*CA{first}},
		{name: "changed, within the interval", write: func() { writeTouched(t, file, second.CertPEM()) }, want: []*CA{first}},
		{name: "after the interval", advance: true, want: []*CA{second}},
		{name: "two CAs", write: func() { writeTouched(t, file, slices.Concat(second.CertPEM(), third.CertPEM())) }, advance: true, want: []*CA{second, third}},
		{name: "no PEM", write: func() { writeTouched(t, file, []byte("not PEM")) }, advance: true, want: []*CA{second, third}},
		{name: "corrupt certificate", write: func() {
			writeTouched(t, file, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
		}, advance: true, want: []*CA{second, third}},
		{name: "removed", write: func() {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
		}, advance: true, want: []*CA{second, third}},
		{name: "repaired", write: func() { writeTouched(t, file, third.CertPEM()) }, advance: true, want: []*CA{third}},
	}
	for _, s := range steps {
		if s.write != nil {
			s.write()
		}
		if s.advance {
			clock.advance(reloadInterval)
		}
		var want []string
		for _, ca := range s.want {
			want = append(want, serial(ca))
		}
		if diff := cmp.Diff(want, serials()); diff != "" {
			t.Errorf("%s: bundle serials (-want +got):\n%s", s.name, diff)
		}
	}
	wantLogs := []string{
		"INFO CA bundle reloaded",
		"INFO CA bundle reloaded",
		"WARN CA bundle reload failed, keeping the previous one",
		"WARN CA bundle reload failed, keeping the previous one",
		"WARN CA bundle reload failed, keeping the previous one",
		"INFO CA bundle reloaded",
	}
	if diff := cmp.Diff(wantLogs, logs.messages()); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
}
