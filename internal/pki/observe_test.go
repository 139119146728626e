package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshfed/meshfed/federation"
)

// grpcServer serves the health service with creds on loopback until the
// test ends, and returns its address.
func grpcServer(t *testing.T, creds credentials.TransportCredentials) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(s, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(lis) })
	t.Cleanup(func() {
		s.Stop()
		wg.Wait()
	})
	return lis.Addr().String()
}

// checkHealth calls the health service at addr through a client for target
// (which sets the authority, and so the server name gRPC verifies).
func checkHealth(t *testing.T, addr, target string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestClientServerName checks the name a client verifies in the hub's
// certificate (DNS SAN localhost, IP SAN 127.0.0.1) over gRPC, which fills
// in the TLS server name from the dialled target when the configuration
// has none.
func TestClientServerName(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, time.Now())
	caFile := writeCA(t, ca, dir)
	hub := writeIdentity(t, ca, dir, "hub", federation.HubSPIFFEID(td))
	east := writeIdentity(t, ca, dir, "east", federation.ClusterSPIFFEID(td, "east"))
	serverCfg, err := ServerConfig(hub.cert, hub.key, caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := grpcServer(t, credentials.NewTLS(serverCfg))

	tests := []struct {
		name       string
		target     string
		serverName string
		wantErr    string // "" for success
	}{
		{name: "name from the target", target: "localhost:443"},
		{name: "name from the target, upper case", target: "LOCALHOST:443"},
		{name: "address from the target", target: "127.0.0.1:443", wantErr: "no server name"},
		{name: "other name from the target", target: "hub.example:443", wantErr: "certificate is valid for localhost"},
		{name: "name configured", target: "127.0.0.1:443", serverName: "localhost"},
		{name: "address configured", target: "127.0.0.1:443", serverName: "127.0.0.1"},
		{name: "other address configured", target: "127.0.0.1:443", serverName: "127.0.0.2", wantErr: "not 127.0.0.2"},
		{name: "other name configured", target: "localhost:443", serverName: "hub.example", wantErr: "not hub.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ClientConfig(east.cert, east.key, caFile, tt.serverName, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = checkHealth(t, addr, tt.target, credentials.NewTLS(cfg))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("health check: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("health check error %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}

// TestObservedCredentials runs a gRPC server with observed credentials and
// clients whose handshakes fail in different ways.
func TestObservedCredentials(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, other := newTestCA(t, now), newTestCA(t, now)
	caFile := writeCA(t, ca, dir)
	hub := writeIdentity(t, ca, dir, "hub", federation.HubSPIFFEID(td))
	east := writeIdentity(t, ca, dir, "east", federation.ClusterSPIFFEID(td, "east"))
	foreign := writeIdentity(t, other, dir, "foreign", federation.ClusterSPIFFEID(td, "east"))
	expiredCert, expiredKey, err := ca.Issue(federation.ClusterSPIFFEID(td, "east"), nil, nil, now.Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := tls.X509KeyPair(expiredCert, expiredKey)
	if err != nil {
		t.Fatal(err)
	}
	serverCfg, err := ServerConfig(hub.cert, hub.key, caFile, nil)
	if err != nil {
		t.Fatal(err)
	}

	var clock fakeClock
	logs := &attrRecorder{}
	reasons := make(chan string, 16)
	creds := observe(credentials.NewTLS(serverCfg), slog.New(logs), func(r string) { reasons <- r }, clock.now)
	addr := grpcServer(t, creds.Clone())

	// A client with a certificate of the CA is served, and not counted.
	good, err := ClientConfig(east.cert, east.key, caFile, "localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkHealth(t, addr, "localhost:443", credentials.NewTLS(good)); err != nil {
		t.Fatalf("health check with a good certificate: %v", err)
	}
	if n := len(reasons); n != 0 {
		t.Fatalf("%d failures counted for a good handshake", n)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	tlsClient := func(certs ...tls.Certificate) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			dialTLSAndRead(t, addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}, Certificates: certs})
		}
	}
	foreignPair, err := tls.LoadX509KeyPair(foreign.cert, foreign.key)
	if err != nil {
		t.Fatal(err)
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.cert)
	eastPair, err := tls.LoadX509KeyPair(east.cert, east.key)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		client func(t *testing.T)
		want   string
	}{
		{name: "no client certificate", client: tlsClient(), want: ReasonNoClientCertificate},
		{name: "client certificate from another CA", client: tlsClient(foreignPair), want: ReasonUnknownAuthority},
		{name: "expired client certificate", client: tlsClient(expired), want: ReasonExpired},
		{name: "client does not trust the hub", client: func(t *testing.T) {
			t.Helper()
			dialTLSAndRead(t, addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: otherRoots, ServerName: "localhost", NextProtos: []string{"h2"}, Certificates: []tls.Certificate{eastPair}})
		}, want: ReasonRejectedByClient},
		{name: "not TLS", client: func(t *testing.T) {
			t.Helper()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: hub\r\n\r\n")
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.ReadAll(conn)
		}, want: ReasonProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock.advance(logEvery) // a line for each case, though all come from 127.0.0.1
			before := len(logs.records())
			tt.client(t)
			if got := waitReason(t, reasons); got != tt.want {
				t.Errorf("reason %q, want %q", got, tt.want)
			}
			recs := logs.records()
			if len(recs) != before+1 {
				t.Fatalf("%d lines logged, want 1: %v", len(recs)-before, recs[before:])
			}
			rec := recs[before]
			if rec.msg != "TLS handshake failed" || rec.level != slog.LevelWarn || rec.attrs["reason"] != tt.want ||
				!strings.HasPrefix(rec.attrs["peer"], "127.0.0.1:") || rec.attrs["err"] == "" {
				t.Errorf("logged %+v, want a warning with the reason %q, the peer's address and the error", rec, tt.want)
			}
		})
	}

	t.Run("rate limit", func(t *testing.T) {
		clock.advance(logEvery)
		before := len(logs.records())
		for range 3 {
			tlsClient()(t)
			if got := waitReason(t, reasons); got != ReasonNoClientCertificate {
				t.Fatalf("reason %q, want %q", got, ReasonNoClientCertificate)
			}
		}
		if n := len(logs.records()) - before; n != 1 {
			t.Fatalf("three failures within a minute from one address logged %d lines, want 1", n)
		}
		clock.advance(logEvery)
		tlsClient()(t)
		waitReason(t, reasons)
		recs := logs.records()
		if n := len(recs) - before; n != 2 {
			t.Fatalf("a failure a minute later: %d lines in all, want 2", n)
		}
		if got := recs[len(recs)-1].attrs["unlogged_since_last"]; got != "2" {
			t.Errorf("unlogged_since_last = %q, want 2", got)
		}
	})
}

// dialTLSAndRead handshakes with addr as a client with cfg, and reads
// until the server gives up on the connection: in TLS 1.3 the server may
// refuse the client's certificate after the client finished its handshake.
func dialTLSAndRead(t *testing.T, addr string, cfg *tls.Config) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		return
	}
	_, _ = io.ReadAll(tc)
}

func waitReason(t *testing.T, reasons <-chan string) string {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case r := <-reasons:
		return r
	case <-timer.C:
		t.Fatal("no handshake failure reported")
		return ""
	}
}

func TestHandshakeFailureReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{err: errors.New("tls: client didn't provide a certificate"), want: ReasonNoClientCertificate},
		{err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, want: ReasonUnknownAuthority},
		{err: &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}, want: ReasonExpired},
		{err: &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.IncompatibleUsage}}, want: ReasonBadCertificate},
		{err: errors.New("tls: failed to parse client certificate: x509: malformed certificate"), want: ReasonBadCertificate},
		{err: &net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate authority")}, want: ReasonRejectedByClient},
		{err: &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, want: ReasonTimeout},
		{err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, want: ReasonProtocol},
		{err: fmt.Errorf("tls: client offered only unsupported versions: %x", []uint16{0x303}), want: ReasonProtocol},
		{err: errors.New("credentials: cannot check peer: missing selected ALPN property"), want: ReasonProtocol},
		{err: io.EOF, want: ReasonConnectionClosed},
		{err: &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, want: ReasonConnectionClosed},
		{err: errors.New("something else"), want: ReasonOther},
	}
	for _, tt := range tests {
		if got := HandshakeFailureReason(tt.err); got != tt.want {
			t.Errorf("HandshakeFailureReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
		if !slices.Contains(HandshakeFailureReasons(), tt.want) {
			t.Errorf("HandshakeFailureReasons() lacks %q", tt.want)
		}
	}
}

func TestLogLimiter(t *testing.T) {
	var clock fakeClock
	peers := func(size int) *logLimiter {
		t.Helper()
		l := observe(nil, nil, nil, clock.now).limiter
		if size > 0 {
			l.peers.Resize(size)
		}
		return l
	}
	type call struct {
		peer           string
		wantOK         bool
		wantSuppressed int
	}
	check := func(t *testing.T, l *logLimiter, calls []call) {
		t.Helper()
		for i, c := range calls {
			ok, suppressed := l.allow(peerKey(c.peer))
			if ok != c.wantOK || suppressed != c.wantSuppressed {
				t.Errorf("call %d (%s): allow = %v, %d; want %v, %d", i, c.peer, ok, suppressed, c.wantOK, c.wantSuppressed)
			}
		}
	}

	t.Run("per peer", func(t *testing.T) {
		l := peers(0)
		check(t, l, []call{
			{peer: "192.0.2.1:1000", wantOK: true},
			{peer: "192.0.2.1:1001"},
			{peer: "192.0.2.2:1000", wantOK: true},
			{peer: "[2001:db8::1]:1000", wantOK: true},
			{peer: "[2001:db8::2]:1000"}, // the same /64
			{peer: "[2001:db8:0:1::1]:1000", wantOK: true},
		})
		clock.advance(logEvery)
		check(t, l, []call{
			{peer: "192.0.2.1:1002", wantOK: true, wantSuppressed: 1},
			{peer: "[2001:db8::3]:1000", wantOK: true, wantSuppressed: 1},
			{peer: "192.0.2.2:1000", wantOK: true},
		})
	})

	t.Run("in all", func(t *testing.T) {
		clock.advance(logEvery)
		l := peers(0)
		for i := range logBurst {
			check(t, l, []call{{peer: fmt.Sprintf("198.51.100.%d:1", i), wantOK: true}})
		}
		check(t, l, []call{{peer: "203.0.113.1:1"}})
		clock.advance(logEvery)
		check(t, l, []call{{peer: "203.0.113.1:1", wantOK: true, wantSuppressed: 1}})
	})

	t.Run("peers remembered", func(t *testing.T) {
		clock.advance(logEvery)
		l := peers(2)
		check(t, l, []call{
			{peer: "192.0.2.1:1", wantOK: true},
			{peer: "192.0.2.2:1", wantOK: true},
			{peer: "192.0.2.3:1", wantOK: true},
			{peer: "192.0.2.1:1", wantOK: true}, // forgotten: the bound holds
		})
		if n := l.peers.Len(); n != 2 {
			t.Errorf("%d peers remembered, want 2", n)
		}
	})
}

// attrRecorder is a slog.Handler that keeps each record's level, message
// and attributes (as text).
type attrRecorder struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *attrRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *attrRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *attrRecorder) WithGroup(string) slog.Handler            { return r }

func (r *attrRecorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, logRecord{level: rec.Level, msg: rec.Message, attrs: attrs})
	return nil
}

func (r *attrRecorder) records() []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}
