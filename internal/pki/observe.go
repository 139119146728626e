package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"google.golang.org/grpc/credentials"
)

// Why a server's TLS handshake failed: the reason label of
// [ObservedCredentials]. The set is closed, so that a metric labelled with
// it stays small whatever clients send.
const (
	// ReasonNoClientCertificate: the client presented no certificate.
	ReasonNoClientCertificate = "no_client_certificate"
	// ReasonUnknownAuthority: the client's certificate is not signed by a
	// CA of the bundle (another CA, or a CA rotated out).
	ReasonUnknownAuthority = "unknown_authority"
	// ReasonExpired: the client's certificate has expired, or is not valid
	// yet.
	ReasonExpired = "expired"
	// ReasonBadCertificate: the client's certificate is otherwise unusable
	// (malformed, the wrong key usage).
	ReasonBadCertificate = "bad_certificate"
	// ReasonRejectedByClient: the client refused the server's certificate,
	// typically because it does not trust the server's CA.
	ReasonRejectedByClient = "rejected_by_client"
	// ReasonProtocol: the client does not speak TLS, or no TLS version,
	// cipher suite or application protocol the server accepts.
	ReasonProtocol = "protocol"
	// ReasonTimeout: the handshake did not finish in time.
	ReasonTimeout = "timeout"
	// ReasonConnectionClosed: the client hung up during the handshake, as
	// TCP health checks do.
	ReasonConnectionClosed = "connection_closed"
	// ReasonOther: anything else.
	ReasonOther = "other"
)

// HandshakeFailureReasons returns every reason [HandshakeFailureReason]
// returns, to initialise the series of a counter labelled with them.
func HandshakeFailureReasons() []string {
	return []string{
		ReasonNoClientCertificate, ReasonUnknownAuthority, ReasonExpired, ReasonBadCertificate,
		ReasonRejectedByClient, ReasonProtocol, ReasonTimeout, ReasonConnectionClosed, ReasonOther,
	}
}

// HandshakeFailureReason classifies the error of a server's failed TLS
// handshake. crypto/tls reports some failures only as text; those are
// matched on it, and fall to [ReasonOther] should the text change.
func HandshakeFailureReason(err error) string {
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
		netErr           net.Error
		opErr            *net.OpError
	)
	msg := err.Error()
	switch {
	case strings.Contains(msg, "didn't provide a certificate"):
		return ReasonNoClientCertificate
	case errors.As(err, &unknownAuthority):
		return ReasonUnknownAuthority
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return ReasonExpired
	case errors.As(err, &invalid), errors.As(err, &verification), strings.Contains(msg, "failed to parse client certificate"):
		return ReasonBadCertificate
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		return ReasonTimeout
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		return ReasonRejectedByClient
	case errors.As(err, &recordHeader), strings.Contains(msg, "unsupported versions"),
		strings.Contains(msg, "no cipher suite"), strings.Contains(msg, "ALPN"), strings.Contains(msg, "application protocol"):
		return ReasonProtocol
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ReasonConnectionClosed
	}
	return ReasonOther
}

// Bounds of the handshake failure log: one line per peer per
// logEvery, at most logBurst lines per logEvery in all, remembering at most
// logPeers peers.
const (
	logEvery = time.Minute
	logBurst = 60
	logPeers = 4096
)

// ObservedCredentials wraps a server's transport credentials so that each
// failed handshake is counted, with onFailure (nil: not counted) given its
// [HandshakeFailureReason], and logged to logger (nil discards) with the
// peer's address and the error: a client with the wrong CA or without a
// certificate otherwise leaves no trace at the server.
//
// The log is rate-limited, so that a scanner cannot flood it: one line per
// peer address (IPv6: per /64) a minute, with how many of its failures
// went unlogged since its last line, and at most 60 lines a minute in all.
// Clients that hang up mid-handshake, as TCP health checks do, are logged
// at debug level.
func ObservedCredentials(inner credentials.TransportCredentials, logger *slog.Logger, onFailure func(reason string)) credentials.TransportCredentials {
	return observe(inner, logger, onFailure, time.Now)
}

func observe(inner credentials.TransportCredentials, logger *slog.Logger, onFailure func(reason string), now func() time.Time) *observed {
	if onFailure == nil {
		onFailure = func(string) {}
	}
	peers, err := simplelru.NewLRU[string, peerLog](logPeers, nil)
	if err != nil {
		panic(err) // NewLRU fails only for a size that is not positive
	}
	return &observed{
		TransportCredentials: inner,
		log:                  orDiscard(logger),
		onFailure:            onFailure,
		limiter:              &logLimiter{every: logEvery, burst: logBurst, now: now, peers: peers},
	}
}

type observed struct {
	credentials.TransportCredentials
	log       *slog.Logger
	onFailure func(reason string)
	limiter   *logLimiter // shared by clones
}

var _ credentials.TransportCredentials = (*observed)(nil)

// ServerHandshake implements credentials.TransportCredentials.
func (o *observed) ServerHandshake(rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := o.TransportCredentials.ServerHandshake(rawConn)
	if err != nil {
		o.failed(rawConn.RemoteAddr(), err)
	}
	return conn, info, err
}

// Clone implements credentials.TransportCredentials.
func (o *observed) Clone() credentials.TransportCredentials {
	c := *o
	c.TransportCredentials = o.TransportCredentials.Clone()
	return &c
}

func (o *observed) failed(addr net.Addr, err error) {
	reason := HandshakeFailureReason(err)
	defer o.onFailure(reason)
	peer := "unknown"
	if addr != nil {
		peer = addr.String()
	}
	ok, unlogged := o.limiter.allow(peerKey(peer))
	if !ok {
		return
	}
	level := slog.LevelWarn
	if reason == ReasonConnectionClosed {
		level = slog.LevelDebug
	}
	attrs := []any{"peer", peer, "reason", reason, "err", err}
	if unlogged > 0 {
		attrs = append(attrs, "unlogged_since_last", unlogged)
	}
	o.log.Log(context.Background(), level, "TLS handshake failed", attrs...) // ServerHandshake has no context
}

// peerKey is what the log is rate-limited by: the IP address of peer (an
// address:port), or its /64 for IPv6, which one host can hold whole.
func peerKey(peer string) string {
	ap, err := netip.ParseAddrPort(peer)
	if err != nil {
		return peer
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	prefix, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return ip.String()
	}
	return prefix.String()
}

// logLimiter decides which failures are logged.
type logLimiter struct {
	every time.Duration
	burst int
	now   func() time.Time

	mu          sync.Mutex
	peers       *simplelru.LRU[string, peerLog]
	windowStart time.Time
	windowLines int
}

type peerLog struct {
	last       time.Time // of the last line logged; zero: none yet
	suppressed int       // failures since then not logged
}

// allow reports whether to log a failure of peer and, if so, how many of
// its failures since its last line were not.
func (l *logLimiter) allow(peer string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e, _ := l.peers.Get(peer)
	if !e.last.IsZero() && now.Sub(e.last) < l.every {
		e.suppressed++
		l.peers.Add(peer, e)
		return false, 0
	}
	if now.Sub(l.windowStart) >= l.every {
		l.windowStart, l.windowLines = now, 0
	}
	if l.windowLines >= l.burst {
		e.suppressed++
		l.peers.Add(peer, e)
		return false, 0
	}
	l.windowLines++
	l.peers.Add(peer, peerLog{last: now})
	return true, e.suppressed
}
