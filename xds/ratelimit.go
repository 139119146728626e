package xds

import (
	"context"
	"net"
	"net/netip"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

// Defaults of the per-address stream rate limit. Pods have addresses of
// their own; streams share one where traffic to the hub is masqueraded to
// the node's address: a node's ztunnel and every pod on it, one ADS stream
// each, up to the kubelet's 110 pods. All of them may reconnect at once
// after a hub restart: a burst of 100 lets nearly all in at once, and 20 a
// second lets the rest in within the gRPC clients' first backoff (1 s),
// while a client in a tight reconnect loop, refused before any handler
// runs, costs the push loop nothing. Behind a NAT that hides a whole
// cluster, raise both.
const (
	DefaultStreamRate  = 20
	DefaultStreamBurst = 100
)

// maxLimitedAddrs bounds the addresses whose buckets are kept: the least
// recently seen is forgotten first, and comes back with a full bucket.
const maxLimitedAddrs = 16384

// streamLimiter bounds how fast each source address opens streams, with a
// token bucket per address. Loopback peers are exempt unless loopback is
// set: they are the hub's own pod (a sidecar, a port-forward, the tests'
// fleets of proxies), not a node's.
type streamLimiter struct {
	limit    rate.Limit
	burst    int
	loopback bool
	clock    clock.PassiveClock

	mu      sync.Mutex
	buckets *simplelru.LRU[netip.Addr, *rate.Limiter]
}

// newStreamLimiter returns a limiter of perSecond new streams per address
// after a burst of burst, or nil (no limit) when perSecond is negative.
func newStreamLimiter(perSecond float64, burst int, loopback bool, clk clock.PassiveClock) *streamLimiter {
	if perSecond < 0 {
		return nil
	}
	buckets, err := simplelru.NewLRU[netip.Addr, *rate.Limiter](maxLimitedAddrs, nil)
	if err != nil {
		panic(err) // only for a size that is not positive
	}
	return &streamLimiter{limit: rate.Limit(perSecond), burst: burst, loopback: loopback, clock: clk, buckets: buckets}
}

// allow takes a token from the bucket of addr's IP. Addresses that are not
// IP addresses (in-process transports) are not limited.
func (l *streamLimiter) allow(addr net.Addr) (netip.Addr, bool) {
	ip, ok := ipOf(addr)
	if !ok || (ip.IsLoopback() && !l.loopback) {
		return ip, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets.Get(ip)
	if !ok {
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets.Add(ip, b)
	}
	return ip, b.AllowN(l.clock.Now(), 1)
}

func ipOf(addr net.Addr) (netip.Addr, bool) {
	if a, ok := addr.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	}
	if addr == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// limitStreams refuses a stream whose address opens streams faster than
// the limit, before any of its work: the cheapest answer to a client in a
// reconnect loop is one that costs no handler.
func (s *Server) limitStreams(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.admitStream(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}

func (s *Server) admitStream(ctx context.Context) error {
	if s.limiter == nil {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ip, ok := s.limiter.allow(p.Addr)
	if ok {
		return nil
	}
	s.refusals.refuse(refusedRateLimited, "peer", ip.String())
	return status.Errorf(codes.ResourceExhausted, "xds: %s opens streams too fast: at most %d at once, then %g a second",
		ip, s.limiter.burst, float64(s.limiter.limit))
}
