package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation"
)

// side is one end of a handshake: what it concluded and why it failed.
type side struct {
	state tls.ConnectionState
	err   error
}

// handshake runs a TLS handshake over loopback TCP and returns both ends'
// results. In TLS 1.3 the client finishes before the server has checked the
// client's certificate, so the client also reads a byte the server writes
// after its handshake: a refusal surfaces there as the server's alert.
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) (server, client side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	done := make(chan side, 1)
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			done <- side{err: err}
			return
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(deadline)
		tc := tls.Server(conn, serverCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			done <- side{err: err}
			return
		}
		_, err = tc.Write([]byte{1})
		done <- side{state: tc.ConnectionState(), err: err}
	}()

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(deadline)
	tc := tls.Client(conn, clientCfg)
	if client.err = tc.HandshakeContext(ctx); client.err == nil {
		client.state = tc.ConnectionState()
		_, client.err = io.ReadFull(tc, make([]byte, 1))
	}
	return <-done, client
}

// identity is a key pair written to files.
type identity struct{ cert, key string }

// writeIdentity issues a certificate for id (with the SANs localhost and
// 127.0.0.1) and writes it to dir/name.crt and dir/name.key.
func writeIdentity(t *testing.T, ca *CA, dir, name string, id *url.URL) identity {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(id, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now(), time.Hour)
	if err != nil {
		t.Fatalf("Issue(%s): %v", id, err)
	}
	ident := identity{cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key")}
	writeTouched(t, ident.key, keyPEM)
	writeTouched(t, ident.cert, certPEM)
	return ident
}

// writeTouched replaces name with data and gives it a modification time
// later than the file it replaces, so that filesystems with coarse
// timestamps still show the change.
func writeTouched(t *testing.T, name string, data []byte) {
	t.Helper()
	mod := time.Now()
	if old, err := os.Stat(name); err == nil && !old.ModTime().Before(mod) {
		mod = old.ModTime().Add(time.Second)
	}
	if err := writeFileAtomic(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(name, mod, mod); err != nil {
		t.Fatal(err)
	}
}

func writeCA(t *testing.T, ca *CA, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(name, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestHandshake(t *testing.T) {
	dir := t.TempDir()
	ca, other := newTestCA(t, time.Now()), newTestCA(t, time.Now())
	caFile := writeCA(t, ca, dir)
	hub := writeIdentity(t, ca, dir, "hub", federation.HubSPIFFEID(td))
	east := writeIdentity(t, ca, dir, "east", federation.ClusterSPIFFEID(td, "east"))
	foreignHub := writeIdentity(t, other, dir, "foreign-hub", federation.HubSPIFFEID(td))
	foreignEast := writeIdentity(t, other, dir, "foreign-east", federation.ClusterSPIFFEID(td, "east"))

	tests := []struct {
		name       string
		server     identity
		client     *identity // nil: the client presents no certificate
		serverName string
		tls12      bool // the client offers TLS 1.2 only
		wantErr    bool // both ends fail
	}{
		{name: "mutual", server: hub, client: &east, serverName: "localhost"},
		{name: "client without certificate", server: hub, serverName: "localhost", wantErr: true},
		{name: "client certificate from another CA", server: hub, client: &foreignEast, serverName: "localhost", wantErr: true},
		{name: "server certificate from another CA", server: foreignHub, client: &east, serverName: "localhost", wantErr: true},
		{name: "wrong server name", server: hub, client: &east, serverName: "hub.example", wantErr: true},
		{name: "TLS 1.2 client", server: hub, client: &east, serverName: "localhost", tls12: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serverCfg, err := ServerConfig(tt.server.cert, tt.server.key, caFile, nil)
			if err != nil {
				t.Fatalf("ServerConfig: %v", err)
			}
			var clientCfg *tls.Config
			if tt.client != nil {
				if clientCfg, err = ClientConfig(tt.client.cert, tt.client.key, caFile, tt.serverName, nil); err != nil {
					t.Fatalf("ClientConfig: %v", err)
				}
			} else {
				roots := x509.NewCertPool()
				roots.AddCert(parseCert(t, ca.CertPEM()))
				clientCfg = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: tt.serverName}
			}
			if tt.tls12 {
				clientCfg.MinVersion, clientCfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			}

			server, client := handshake(t, serverCfg, clientCfg)
			if (server.err != nil) != tt.wantErr || (client.err != nil) != tt.wantErr {
				t.Fatalf("server error %v, client error %v; want errors: %v", server.err, client.err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if server.state.Version != tls.VersionTLS13 {
				t.Errorf("version %x, want TLS 1.3", server.state.Version)
			}
			if got, err := PeerSPIFFEID(server.state); err != nil || got.String() != federation.ClusterSPIFFEID(td, "east").String() {
				t.Errorf("server: PeerSPIFFEID = %v, %v; want %v", got, err, federation.ClusterSPIFFEID(td, "east"))
			}
			// The client verifies the chain itself (against the bundle in
			// use), so crypto/tls records no verified chains on its side.
			if got := urisOf(client.state.PeerCertificates[0]); !slices.Equal(got, []string{federation.HubSPIFFEID(td).String()}) {
				t.Errorf("client: server's URI SANs %q, want %v", got, federation.HubSPIFFEID(td))
			}
		})
	}
}

func TestConfigLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, time.Now())
	caFile := writeCA(t, ca, dir)
	hub := writeIdentity(t, ca, dir, "hub", federation.HubSPIFFEID(td))
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name              string
		cert, key, caFile string
	}{
		{name: "missing cert", cert: missing, key: hub.key, caFile: caFile},
		{name: "missing key", cert: hub.cert, key: missing, caFile: caFile},
		{name: "key of no certificate", cert: hub.cert, key: garbage, caFile: caFile},
		{name: "missing CA", cert: hub.cert, key: hub.key, caFile: missing},
		{name: "CA without certificates", cert: hub.cert, key: hub.key, caFile: garbage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ServerConfig(tt.cert, tt.key, tt.caFile, nil); err == nil {
				t.Error("ServerConfig succeeded")
			}
			if _, err := ClientConfig(tt.cert, tt.key, tt.caFile, "localhost", nil); err == nil {
				t.Error("ClientConfig succeeded")
			}
		})
	}
}

// TestReload rotates the key pair of one end and checks that handshakes
// present the new certificate once the check interval has passed, and keep
// the last good one while the files are broken.
func TestReload(t *testing.T) {
	tests := []struct {
		name     string
		rotating string // the identity whose files are rewritten: "hub" (server) or "east" (client)
	}{
		{name: "server", rotating: "hub"},
		{name: "client", rotating: "east"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ca := newTestCA(t, time.Now())
			cas, err := LoadBundle(writeCA(t, ca, dir), nil)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]*url.URL{"hub": federation.HubSPIFFEID(td), "east": federation.ClusterSPIFFEID(td, "east")}
			var clock fakeClock
			logs := &recorder{}
			kps := make(map[string]*KeyPair)
			for name, id := range ids {
				files := writeIdentity(t, ca, dir, name, id)
				logger, now := (*slog.Logger)(nil), time.Now
				if name == tt.rotating {
					logger, now = slog.New(logs), clock.now
				}
				if kps[name], err = loadKeyPair(files.cert, files.key, logger, now); err != nil {
					t.Fatal(err)
				}
			}
			serverCfg, clientCfg := NewServerConfig(kps["hub"], cas), NewClientConfig(kps["east"], cas, "localhost")

			// presented returns the serial of the certificate the rotating end
			// presented in a fresh handshake.
			presented := func(t *testing.T) *big.Int {
				t.Helper()
				server, client := handshake(t, serverCfg, clientCfg)
				if server.err != nil || client.err != nil {
					t.Fatalf("handshake: server %v, client %v", server.err, client.err)
				}
				seenBy := client
				if tt.rotating == "east" {
					seenBy = server
				}
				return seenBy.state.PeerCertificates[0].SerialNumber
			}
			// rotate writes a new key pair and returns its serial.
			rotate := func(t *testing.T) *big.Int {
				t.Helper()
				files := writeIdentity(t, ca, dir, tt.rotating, ids[tt.rotating])
				b, err := os.ReadFile(files.cert)
				if err != nil {
					t.Fatal(err)
				}
				return parseCert(t, b).SerialNumber
			}

			first := kps[tt.rotating].Leaf().SerialNumber
			if got := presented(t); got.Cmp(first) != 0 {
				t.Fatalf("presented serial %x, want the initial %x", got, first)
			}

			second := rotate(t)
			if got := presented(t); got.Cmp(first) != 0 {
				t.Errorf("within the check interval: presented serial %x, want still %x", got, first)
			}
			clock.advance(reloadInterval)
			if got := presented(t); got.Cmp(second) != 0 {
				t.Errorf("after the check interval: presented serial %x, want the rotated %x", got, second)
			}

			writeTouched(t, filepath.Join(dir, tt.rotating+".key"), []byte("not a key"))
			clock.advance(reloadInterval)
			if got := presented(t); got.Cmp(second) != 0 {
				t.Errorf("with a broken key file: presented serial %x, want the last good %x", got, second)
			}

			third := rotate(t)
			clock.advance(reloadInterval)
			if got := presented(t); got.Cmp(third) != 0 {
				t.Errorf("after repair: presented serial %x, want %x", got, third)
			}

			want := []string{
				"INFO TLS key pair reloaded",
				"WARN TLS key pair reload failed, keeping the previous one",
				"INFO TLS key pair reloaded",
			}
			if diff := cmp.Diff(want, logs.messages()); diff != "" {
				t.Errorf("logs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPeerSPIFFEID(t *testing.T) {
	spiffe := &url.URL{Scheme: "spiffe", Host: td, Path: "/meshfed/cluster/east"}
	state := func(uris ...*url.URL) tls.ConnectionState {
		return tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{SerialNumber: big.NewInt(7), URIs: uris}}}}
	}
	tests := []struct {
		name    string
		state   tls.ConnectionState
		want    *url.URL
		wantErr bool
	}{
		{name: "one SPIFFE ID", state: state(spiffe), want: spiffe},
		{name: "unverified", state: tls.ConnectionState{PeerCertificates: []*x509.Certificate{{URIs: []*url.URL{spiffe}}}}, wantErr: true},
		{name: "no URI SAN", state: state(), wantErr: true},
		{name: "two SPIFFE IDs", state: state(spiffe, federation.HubSPIFFEID(td)), wantErr: true},
		{name: "SPIFFE ID and another URI", state: state(spiffe, &url.URL{Scheme: "https", Host: "example.com"}), wantErr: true},
		{name: "not spiffe", state: state(&url.URL{Scheme: "https", Host: "example.com"}), wantErr: true},
		{name: "no trust domain", state: state(&url.URL{Scheme: "spiffe", Path: "/meshfed/hub"}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PeerSPIFFEID(tt.state)
			if tt.wantErr {
				if !errors.Is(err, federation.ErrBadIdentity) {
					t.Errorf("PeerSPIFFEID() = %v, %v; want an error wrapping %v", got, err, federation.ErrBadIdentity)
				}
				return
			}
			if err != nil || got.String() != tt.want.String() {
				t.Errorf("PeerSPIFFEID() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// recorder is a slog.Handler that keeps "LEVEL message" of each record.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func TestCheckSPIFFEID(t *testing.T) {
	east, west := federation.ClusterSPIFFEID(td, "east"), federation.ClusterSPIFFEID(td, "west")
	cert := func(uris ...*url.URL) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(7), URIs: uris}
	}
	tests := []struct {
		name    string
		cert    *x509.Certificate
		wantErr string // "" for none
	}{
		{name: "match", cert: cert(east)},
		{name: "other cluster", cert: cert(west), wantErr: "identity is spiffe://meshfed.test/meshfed/cluster/west, want spiffe://meshfed.test/meshfed/cluster/east"},
		{name: "other trust domain", cert: cert(federation.ClusterSPIFFEID("other.test", "east")), wantErr: "identity is spiffe://other.test/meshfed/cluster/east"},
		{name: "no URI SAN", cert: cert(), wantErr: "no URI SAN"},
		{name: "two URI SANs", cert: cert(east, west), wantErr: "2 URI SANs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSPIFFEID(tt.cert, east)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("CheckSPIFFEID: %v", err)
				}
				return
			}
			if !errors.Is(err, federation.ErrBadIdentity) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CheckSPIFFEID error = %v, want one wrapping %v saying %q", err, federation.ErrBadIdentity, tt.wantErr)
			}
		})
	}
}
