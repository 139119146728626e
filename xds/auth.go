package xds

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/internal/pki"
	"github.com/meshfed/meshfed/xds/translate"
)

// Authorizer decides whether a proxy whose verified client certificate
// names the SPIFFE ID id may be served as p, what its node claims (read by
// [ProxyFromNode]). clusters are the clusterset's, from the last snapshot
// pushed. A nil error admits the proxy; errors wrapping
// [ErrForeignTrustDomain] or [ErrClusterTrustDomain] are counted under
// those reasons, any other as "denied". It runs on the first request of
// every stream, under the lock of the book of proxies: it must be quick
// and must not block.
type Authorizer func(id *url.URL, p Proxy, clusters []*clusterset.ClusterInfo) error

// TrustDomainAuthorizer admits identities of the clusterset's trust
// domains: defaultTrustDomain and those its clusters name. A proxy that
// claims a cluster must moreover have an identity in that cluster's trust
// domain, defaultTrustDomain for a cluster that names none or that the
// clusterset does not know: the trust domain the translator gives the
// cluster's workloads, so that the hub serves a cluster's view only to
// identities it would itself call that cluster's. What a cluster names
// is what its spoke declared, which the hub's cluster policy checks.
func TrustDomainAuthorizer(defaultTrustDomain string) Authorizer {
	return func(id *url.URL, p Proxy, clusters []*clusterset.ClusterInfo) error {
		td := id.Host
		of := func(c *clusterset.ClusterInfo) string { return cmp.Or(c.TrustDomain, defaultTrustDomain) }
		if td != defaultTrustDomain && !slices.ContainsFunc(clusters, func(c *clusterset.ClusterInfo) bool { return of(c) == td }) {
			all := []string{defaultTrustDomain}
			for _, c := range clusters {
				if !slices.Contains(all, of(c)) {
					all = append(all, of(c))
				}
			}
			slices.Sort(all)
			return fmt.Errorf("%w: %q is not one of the clusterset's trust domains (%s)", ErrForeignTrustDomain, td, strings.Join(all, ", "))
		}
		if p.Cluster == "" {
			return nil
		}
		want := defaultTrustDomain
		if i := slices.IndexFunc(clusters, func(c *clusterset.ClusterInfo) bool { return c.ID == p.Cluster }); i >= 0 {
			want = of(clusters[i])
		}
		if td != want {
			return fmt.Errorf("%w: the node claims cluster %q, whose trust domain is %q, not %q", ErrClusterTrustDomain, p.Cluster, want, td)
		}
		return nil
	}
}

// Reasons a stream is refused: the reason label of
// meshfed_xds_streams_refused_total.
const (
	refusedRateLimited        = "rate_limited"
	refusedNoIdentity         = "no_identity"
	refusedTrustDomain        = "trust_domain"
	refusedClusterTrustDomain = "cluster_trust_domain"
	refusedDenied             = "denied"
	refusedInvalidNode        = "invalid_node"
	refusedWorkloadAPI        = "workload_api"
)

var refusalReasons = []string{
	refusedRateLimited, refusedNoIdentity, refusedTrustDomain, refusedClusterTrustDomain, refusedDenied, refusedInvalidNode, refusedWorkloadAPI,
}

// ErrWorkloadAPIOff refuses a ztunnel when the hub does not serve the
// workload API; its message names the way ztunnels should go.
var ErrWorkloadAPIOff = status.Error(codes.FailedPrecondition, "xds: this hub does not serve the workload API "+
	"(istio.workload.Address, istio.security.Authorization): it holds the clusterset's exported services, "+
	"not this cluster's own workloads, waypoints or AuthorizationPolicies, so a ztunnel served here would break "+
	"local traffic and enforce no policy. Keep ztunnels on their cluster's istiod (docs/ambient.md); "+
	"a hub started with --xds-workload-api serves them anyway, for a mesh without istiod")

// streamAuth authenticates streams when the TLS configuration requires
// client certificates, and authorizes their proxies.
type streamAuth struct {
	// required is set when every peer has a verified certificate: only
	// then does an identity mean anything.
	required  bool
	authorize Authorizer
	refusals  *refusals
	// workloadAPI serves the workload API's types; off, a stream that
	// asks for one is refused.
	workloadAPI bool
}

// checkType refuses a request for a type the hub does not serve.
func (a *streamAuth) checkType(node *adspb.Node, typeURL string) error {
	if a.workloadAPI || (typeURL != translate.AddressType && typeURL != translate.AuthorizationType) {
		return nil
	}
	a.refusals.refuse(refusedWorkloadAPI, "proxy", node.GetId(), "type", typeLabel(typeURL))
	return ErrWorkloadAPIOff
}

// identify returns the SPIFFE ID of a stream's peer, or nil when
// identities are not required. A stream whose peer has none is refused.
func (a *streamAuth) identify(ctx context.Context) (*url.URL, error) {
	if !a.required {
		return nil, nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, a.refuseUnauthenticated(nil, errors.New("no peer in the stream's context"))
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, a.refuseUnauthenticated(p, errors.New("the peer did not connect over TLS"))
	}
	id, err := pki.PeerSPIFFEID(info.State)
	if err != nil {
		return nil, a.refuseUnauthenticated(p, err)
	}
	return id, nil
}

func (a *streamAuth) refuseUnauthenticated(p *peer.Peer, err error) error {
	addr := ""
	if p != nil && p.Addr != nil {
		addr = p.Addr.String()
	}
	a.refusals.refuse(refusedNoIdentity, "peer", addr, "err", err)
	return status.Errorf(codes.Unauthenticated, "xds: peer %s has no SPIFFE identity: %v", addr, err)
}

// check authorizes the proxy of a stream whose peer is id (nil when
// identities are not required).
func (a *streamAuth) check(id *url.URL, p Proxy, clusters []*clusterset.ClusterInfo) error {
	if !a.required {
		return nil
	}
	if id == nil {
		a.refusals.refuse(refusedNoIdentity, "proxy", p.ID)
		return status.Errorf(codes.Unauthenticated, "xds: proxy %q has no SPIFFE identity", p.ID)
	}
	err := a.authorize(id, p, clusters)
	if err == nil {
		return nil
	}
	reason := refusedDenied
	switch {
	case errors.Is(err, ErrForeignTrustDomain):
		reason = refusedTrustDomain
	case errors.Is(err, ErrClusterTrustDomain):
		reason = refusedClusterTrustDomain
	}
	a.refusals.refuse(reason, "proxy", p.ID, "identity", id.String(), "cluster", p.Cluster, "network", p.Network, "err", err)
	return status.Errorf(codes.PermissionDenied, "xds: proxy %q with identity %s refused: %v", p.ID, id, err)
}

// refusals counts refused streams and logs them, a few a second at most:
// a client in a reconnect loop is refused again and again, and must not
// flood the log.
type refusals struct {
	counter    *prometheus.CounterVec
	log        *slog.Logger
	clock      clock.PassiveClock
	logs       *rate.Limiter
	suppressed atomic.Int64
}

func newRefusals(counter *prometheus.CounterVec, log *slog.Logger, clk clock.PassiveClock) *refusals {
	return &refusals{counter: counter, log: log, clock: clk, logs: rate.NewLimiter(rate.Every(time.Second), 10)}
}

func (r *refusals) refuse(reason string, attrs ...any) {
	r.counter.WithLabelValues(reason).Inc()
	if !r.logs.AllowN(r.clock.Now(), 1) {
		r.suppressed.Add(1)
		return
	}
	attrs = append([]any{"reason", reason}, attrs...)
	if n := r.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	r.log.Warn("xds stream refused", attrs...)
}
