package ingest

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
	"github.com/meshfed/meshfed/hub/registry"
)

// Stream is the part of a Sync stream the server uses.
type Stream interface {
	Context() context.Context
	Send(*federationpb.HubMessage) error
	Recv() (*federationpb.SpokeMessage, error)
}

// Registry is the writer side of the hub registry that ingest needs.
type Registry interface {
	Claim(id federation.ClusterID, build, session, peer string) (*registry.Conn, error)
	LimitsFor(id federation.ClusterID) registry.Limits
	// Admit reports why a cluster may not stream (the cluster policy
	// does not name it).
	Admit(id federation.ClusterID) error
	syncproto.Membership
}

var (
	_ Registry               = (*registry.Registry)(nil)
	_ syncproto.Conn         = (*registry.Conn)(nil)
	_ syncproto.HubTransport = Stream(nil)
)

// Config configures the server.
type Config struct {
	// MaxMessageBytes bounds every message in both directions; it is also
	// announced to spokes so that they chunk below it.
	MaxMessageBytes int
	// HubID names this hub replica in Welcome messages.
	HubID string
	// Build is the hub's build, sent in Welcome messages.
	Build string
	// Clusterset is the clusterset the hub serves (--clusterset; empty:
	// any spoke).
	Clusterset string
	// Imports, when set, gives the stream of an importing spoke the
	// imports its cluster should hold.
	Imports func(id federation.ClusterID, want syncproto.ImportsWanted) syncproto.ImportsFeed
}

// Server implements the Federation service.
type Server struct {
	federationpb.UnimplementedFederationServer

	hub     *syncproto.Hub
	auth    Authenticator
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// NewServer returns a federation server writing to reg. metrics may be nil.
func NewServer(cfg Config, reg Registry, auth Authenticator, metrics *Metrics, log *slog.Logger) *Server {
	hub := syncproto.NewHub(syncproto.HubConfig{
		MaxMessageBytes: cfg.MaxMessageBytes,
		HubID:           cfg.HubID,
		Build:           cfg.Build,
		Clusterset:      cfg.Clusterset,
		LimitsFor: func(id federation.ClusterID) syncproto.Limits {
			l := reg.LimitsFor(id)
			return syncproto.Limits{MaxServices: l.MaxServices, MaxEndpoints: l.MaxEndpoints, MaxWorkloads: l.MaxWorkloads}
		},
		Admit:    reg.Admit,
		NackCode: nackCode,
		Members:  reg,
		Imports:  cfg.Imports,
	}, func(ctx context.Context, id federation.ClusterID, hello *federationpb.Hello) (syncproto.Conn, error) {
		c, err := reg.Claim(id, hello.GetBuild(), hello.GetSession(), peerAddr(ctx))
		if err != nil {
			return nil, err
		}
		return c, nil
	})
	return &Server{hub: hub, auth: auth, log: log, metrics: metrics, now: time.Now}
}

// nackCode gives the Nack codes of the registry's own errors.
func nackCode(err error) federationpb.NackCode {
	switch {
	case errors.Is(err, registry.ErrNoBase):
		return federationpb.NackCode_NACK_CODE_NO_BASE
	case errors.Is(err, registry.ErrStaleVersion):
		return federationpb.NackCode_NACK_CODE_STALE_VERSION
	}
	return federationpb.NackCode_NACK_CODE_UNSPECIFIED
}

// Sync implements federationpb.FederationServer.
func (s *Server) Sync(stream federationpb.Federation_SyncServer) error {
	return s.Serve(stream)
}

// Serve runs the sync protocol on one stream until it ends. The returned
// error is a gRPC status.
func (s *Server) Serve(stream Stream) error {
	ctx := stream.Context()
	bound, err := s.auth.Authenticate(ctx)
	if err != nil {
		s.log.Warn("stream refused", "err", err)
		return status.Errorf(codes.Unauthenticated, "%v", err)
	}
	o := &observer{s: s, log: s.log, peer: peerAddr(ctx)}
	err = s.hub.Serve(ctx, stream, bound, o)
	if o.id != "" {
		s.metrics.connected(o.id, -1)
	}
	return o.status(err)
}

// status turns the reason a session ended into the stream's gRPC status.
func (o *observer) status(err error) error {
	var mismatch *syncproto.ClusterMismatchError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syncproto.ErrSpokeGone):
		o.log.Info("spoke disconnected", "err", errors.Unwrap(err))
		return nil
	case errors.Is(err, syncproto.ErrSuperseded):
		o.log.Info("stream superseded by a newer one", "peer", o.peer)
		return status.Error(codes.Aborted, registry.ErrSuperseded.Error())
	case errors.Is(err, syncproto.ErrReset):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, syncproto.ErrBadHello):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, syncproto.ErrOtherClusterset):
		o.log.Warn("stream refused: the cluster is a member of another clusterset", "err", err)
		o.s.metrics.refused(refusedOtherClusterset)
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, syncproto.ErrProtocolVersion):
		o.log.Warn("stream refused: the spoke speaks a protocol version this hub does not", "err", err)
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, registry.ErrHeld):
		o.log.Warn("stream refused: two spokes stream for one cluster; the one that took it over keeps it", "err", err)
		o.s.metrics.refused(refusedDuplicate)
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, syncproto.ErrNotAdmitted):
		o.log.Warn("stream refused: the cluster policy does not admit the cluster", "err", err)
		o.s.metrics.refused(refusedNotAdmitted)
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.As(err, &mismatch):
		o.log.Warn("stream refused: claimed cluster differs from its certificate", "cluster", mismatch.Claimed, "certificate", mismatch.Bound)
		o.s.metrics.refused(refusedMismatch)
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The spoke's connection dropped, or the hub is stopping.
		o.log.Info("stream canceled", "err", err)
		return status.FromContextError(err).Err()
	}
	return err
}

// peerAddr is the address of the stream's peer, or "".
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
