package ingest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStream is a server stream in memory; it ends when its context does,
// which the test cancels once Serve returns, as gRPC does.
type memStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	in     chan *federationpb.SpokeMessage
	out    chan *federationpb.HubMessage
}

func (s *memStream) Context() context.Context { return s.ctx }

func (s *memStream) Send(m *federationpb.HubMessage) error {
	select {
	case s.out <- m:
		return nil
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *memStream) Recv() (*federationpb.SpokeMessage, error) {
	select {
	case m, ok := <-s.in:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

// serve runs srv on a new stream whose context carries p (nil: none) and
// returns the stream and Serve's result.
func serve(t *testing.T, srv *Server, p *peer.Peer) (*memStream, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	if p != nil {
		ctx = peer.NewContext(ctx, p)
	}
	s := &memStream{ctx: ctx, cancel: cancel, in: make(chan *federationpb.SpokeMessage, 8), out: make(chan *federationpb.HubMessage, 8)}
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		err := srv.Serve(s)
		cancel()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return s, done
}

func hello(cluster string) *federationpb.SpokeMessage {
	return &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: cluster, Session: "s1"}}}
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatal("Serve did not return")
		return nil
	}
}

// tlsPeer is a peer that presented a verified certificate for id.
func tlsPeer(id *url.URL) *peer.Peer {
	leaf := &x509.Certificate{URIs: []*url.URL{id}}
	return &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5000},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}},
	}
}

func newTestServer(auth Authenticator, metrics *Metrics) *Server {
	return NewServer(Config{MaxMessageBytes: 1 << 20, HubID: "test"}, registry.New(registry.Config{}), auth, metrics,
		slog.New(slog.DiscardHandler))
}

func TestIngestAuthenticates(t *testing.T) {
	spiffe := PeerCertificate{TrustDomain: "cluster.local"}
	tests := []struct {
		name    string
		auth    Authenticator
		peer    *peer.Peer
		claim   string
		code    codes.Code
		refused float64 // refusals counted
	}{
		{"authenticator error", AuthenticatorFunc(func(context.Context) (federation.ClusterID, error) { return "", errors.New("no") }), nil, "east", codes.Unauthenticated, 0},
		{"no peer", spiffe, nil, "east", codes.Unauthenticated, 0},
		{"plaintext peer", spiffe, &peer.Peer{Addr: &net.TCPAddr{}}, "east", codes.Unauthenticated, 0},
		{"another trust domain", spiffe, tlsPeer(federation.ClusterSPIFFEID("example.org", "east")), "east", codes.Unauthenticated, 0},
		{"the hub's identity", spiffe, tlsPeer(federation.HubSPIFFEID("cluster.local")), "east", codes.Unauthenticated, 0},
		{"claim of another cluster", spiffe, tlsPeer(federation.ClusterSPIFFEID("cluster.local", "west")), "east", codes.PermissionDenied, 1},
		{"its own cluster", spiffe, tlsPeer(federation.ClusterSPIFFEID("cluster.local", "east")), "east", codes.OK, 0},
		{"insecure", Insecure, nil, "east", codes.OK, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			metrics := NewMetrics(prometheus.NewRegistry())
			s, done := serve(t, newTestServer(tc.auth, metrics), tc.peer)
			s.in <- hello(tc.claim)
			if tc.code == codes.OK {
				select {
				case m := <-s.out:
					if m.GetWelcome() == nil {
						t.Fatalf("got %v, want a welcome", m)
					}
				case err := <-done:
					t.Fatalf("Serve() = %v, want a welcome", err)
				}
				return
			}
			if err := result(t, done); status.Code(err) != tc.code {
				t.Errorf("Serve() = %v, want code %v", err, tc.code)
			}
			if got := testutil.ToFloat64(metrics.refusals.WithLabelValues(refusedMismatch)); got != tc.refused {
				t.Errorf("%v refusals counted, want %v", got, tc.refused)
			}
		})
	}
}

func TestIngestStatusCodes(t *testing.T) {
	update := &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: &federationpb.ShardUpdate{Version: 1}}}
	tests := []struct {
		name   string
		stream func(t *testing.T, s *memStream)
		code   codes.Code
	}{
		{"no hello", func(_ *testing.T, s *memStream) { s.in <- update }, codes.InvalidArgument},
		{"invalid cluster", func(_ *testing.T, s *memStream) { s.in <- hello("East_1") }, codes.InvalidArgument},
		{"spoke disconnected", func(_ *testing.T, s *memStream) {
			s.in <- hello("east")
			<-s.out
			close(s.in)
		}, codes.OK},
		{"stream canceled", func(_ *testing.T, s *memStream) {
			s.in <- hello("east")
			<-s.out
			s.cancel()
		}, codes.Canceled},
		{"chunks out of order", func(_ *testing.T, s *memStream) {
			s.in <- hello("east")
			<-s.out
			s.in <- &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: &federationpb.ShardUpdate{Version: 1, More: true}}}
			s.in <- &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: &federationpb.ShardUpdate{Version: 2}}}
		}, codes.Aborted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, done := serve(t, newTestServer(Insecure, nil), nil)
			tc.stream(t, s)
			if err := result(t, done); status.Code(err) != tc.code {
				t.Errorf("Serve() = %v, want code %v", err, tc.code)
			}
		})
	}
}

func TestIngestSuperseded(t *testing.T) {
	metrics := NewMetrics(prometheus.NewRegistry())
	srv := newTestServer(Insecure, metrics)
	old, oldDone := serve(t, srv, nil)
	old.in <- hello("east")
	<-old.out
	newer, _ := serve(t, srv, nil)
	newer.in <- hello("east")
	<-newer.out
	err := result(t, oldDone)
	if status.Code(err) != codes.Aborted || status.Convert(err).Message() != registry.ErrSuperseded.Error() {
		t.Fatalf("the older stream ended with %v, want Aborted: %v", err, registry.ErrSuperseded)
	}
	if got := testutil.ToFloat64(metrics.streams.WithLabelValues("east")); got != 1 {
		t.Errorf("%v streams of east counted, want 1", got)
	}
}

// TestUpdateSeriesFromTheFirstStream: a cluster's ack and nack series
// exist, at 0, from its first stream, so that an alert on increase()
// sees its first Nack.
func TestUpdateSeriesFromTheFirstStream(t *testing.T) {
	metrics := NewMetrics(prometheus.NewRegistry())
	metrics.connected("east", 1)
	for _, result := range []string{"ack", "nack"} {
		if got := testutil.ToFloat64(metrics.updates.WithLabelValues("east", result)); got != 0 {
			t.Errorf("%s: %v", result, got)
		}
	}
	if n := testutil.CollectAndCount(metrics.updates, "meshfed_hub_shard_updates_total"); n != 2 {
		t.Errorf("%d series of meshfed_hub_shard_updates_total, want east's ack and nack", n)
	}
}

// TestIngestRefusesAnotherClusterset: a hub of one clusterset refuses a
// spoke whose cluster's About API names another, with FailedPrecondition,
// counted; a spoke that names none, or the hub's, is welcomed and told
// the hub's.
func TestIngestRefusesAnotherClusterset(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	srv := NewServer(Config{MaxMessageBytes: 1 << 20, HubID: "test", Clusterset: "prod"}, registry.New(registry.Config{}), Insecure, metrics,
		slog.New(slog.DiscardHandler))
	s, done := serve(t, srv, nil)
	s.in <- &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: "east", Session: "s1", Clusterset: "staging"}}}
	if err := result(t, done); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"staging"`) || !strings.Contains(err.Error(), `"prod"`) {
		t.Errorf("Serve() = %v, want FailedPrecondition naming both clustersets", err)
	}
	if got := testutil.ToFloat64(metrics.refusals.WithLabelValues(refusedOtherClusterset)); got != 1 {
		t.Errorf("refusals{reason=other_clusterset} = %v, want 1", got)
	}
	for _, cs := range []string{"", "prod"} {
		s, _ := serve(t, srv, nil)
		s.in <- &federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: "west", Session: "s-" + cs, Clusterset: cs}}}
		if w := (<-s.out).GetWelcome(); w.GetClusterset() != "prod" {
			t.Errorf("spoke of clusterset %q: welcome %v, want one naming prod", cs, w)
		}
		s.cancel()
	}
}
