package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/registry"
)

// Stream is the part of a Sync stream the protocol uses.
type Stream interface {
	Context() context.Context
	Send(*federationpb.HubMessage) error
	Recv() (*federationpb.SpokeMessage, error)
}

// Registry is the writer side of the hub registry that ingest needs.
type Registry interface {
	Connect(id federation.ClusterID, build string) *registry.Conn
	Limits() registry.Limits
}

var _ Registry = (*registry.Registry)(nil)

// Config configures the server.
type Config struct {
	// MaxMessageBytes bounds every message in both directions; it is also
	// announced to spokes so that they chunk below it.
	MaxMessageBytes int
	// HubID names this hub replica in Welcome messages.
	HubID string
}

// Server implements the Federation service.
type Server struct {
	federationpb.UnimplementedFederationServer

	cfg     Config
	reg     Registry
	auth    Authenticator
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// NewServer returns a federation server writing to reg. metrics may be nil.
func NewServer(cfg Config, reg Registry, auth Authenticator, metrics *Metrics, log *slog.Logger) *Server {
	return &Server{cfg: cfg, reg: reg, auth: auth, log: log, metrics: metrics, now: time.Now}
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
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "the first message of a stream must be Hello")
	}
	id := federation.ClusterID(hello.GetClusterId())
	if err := federation.ValidateCluster(&federationpb.Cluster{Id: string(id)}); err != nil {
		return status.Errorf(codes.InvalidArgument, "hello: %v", err)
	}
	if bound != "" && bound != id {
		s.log.Warn("stream refused: claimed cluster differs from its certificate", "cluster", id, "certificate", bound)
		s.metrics.refused()
		return status.Errorf(codes.PermissionDenied, "this credential is bound to cluster %q; it cannot publish cluster %q", bound, id)
	}
	log := s.log.With("cluster", id, "session", hello.GetSession())

	conn := s.reg.Connect(id, hello.GetBuild())
	defer conn.Close()
	s.metrics.connected(id, 1)
	defer s.metrics.connected(id, -1)

	version, resume := conn.Resume(hello.GetSession(), hello.GetAckedVersion(), hello.GetSentVersion())
	limits := s.reg.Limits()
	welcome := &federationpb.Welcome{
		Resume:  resume,
		Version: version,
		HubId:   s.cfg.HubID,
		Limits: &federationpb.Limits{
			MaxMessageBytes: uint32(s.cfg.MaxMessageBytes),
			MaxServices:     uint32(limits.MaxServices),
			MaxEndpoints:    uint32(limits.MaxEndpoints),
			MaxWorkloads:    uint32(limits.MaxWorkloads),
		},
	}
	if err := stream.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	log.Info("spoke connected", "resume", resume, "version", version, "build", hello.GetBuild())

	msgs := make(chan *federationpb.SpokeMessage)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	a := assembler{limits: limits}
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-conn.Superseded():
			log.Info("stream superseded by a newer one")
			return status.Error(codes.Aborted, registry.ErrSuperseded.Error())
		case err := <-recvErr:
			log.Info("spoke disconnected", "err", err)
			return nil
		case m := <-msgs:
			u := m.GetUpdate()
			if u == nil {
				continue // a message kind this hub does not know yet
			}
			s.metrics.received(id, proto.Size(m))
			complete, nack := a.add(u)
			if nack == nil && complete == nil {
				continue // more chunks to come
			}
			if nack == nil {
				nack = s.apply(conn, hello.GetSession(), complete, log)
			}
			if nack != nil {
				conn.RecordNack(nack.GetReason())
				s.metrics.update(id, "nack")
				log.Warn("update rejected", "version", nack.GetVersion(), "code", nack.GetCode(), "reason", nack.GetReason())
				if nack.GetCode() == federationpb.NackCode_NACK_CODE_UNSPECIFIED {
					return status.Error(codes.Aborted, nack.GetReason())
				}
				if err := stream.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Nack{Nack: nack}}); err != nil {
					return err
				}
				continue
			}
			s.metrics.update(id, "ack")
			if t := complete.GetObservedTime(); t != nil {
				s.metrics.observeDelay(s.now().Sub(t.AsTime()))
			}
			ack := &federationpb.Ack{Version: complete.GetVersion(), Nonce: complete.GetNonce()}
			if err := stream.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Ack{Ack: ack}}); err != nil {
				return err
			}
		}
	}
}

// apply applies a complete update and returns a Nack when it was rejected.
// A Nack with an unspecified code ends the stream.
func (s *Server) apply(conn *registry.Conn, session string, u *federationpb.ShardUpdate, log *slog.Logger) *federationpb.Nack {
	err := conn.Apply(session, u)
	if err == nil {
		log.Debug("update applied", "version", u.GetVersion(), "full", u.GetFull(),
			"services", len(u.GetServices()), "endpoints", len(u.GetEndpoints()), "workloads", len(u.GetWorkloads()))
		return nil
	}
	nack := &federationpb.Nack{Version: u.GetVersion(), Nonce: u.GetNonce(), Reason: err.Error()}
	var verr *federation.ValidationError
	switch {
	case errors.As(err, &verr):
		nack.Code = federationpb.NackCode_NACK_CODE_INVALID
		nack.Object = verr.Object()
		nack.Field = verr.Field
	case errors.Is(err, federation.ErrOverLimit):
		nack.Code = federationpb.NackCode_NACK_CODE_OVER_LIMIT
	case errors.Is(err, registry.ErrNoBase):
		nack.Code = federationpb.NackCode_NACK_CODE_NO_BASE
	case errors.Is(err, registry.ErrStaleVersion):
		nack.Code = federationpb.NackCode_NACK_CODE_STALE_VERSION
	}
	return nack
}

// assembler joins the chunks of one version into one update and bounds
// what it holds by the registry's limits.
type assembler struct {
	limits  registry.Limits
	pending *federationpb.ShardUpdate
	objects int
	// dropping is the version whose remaining chunks are discarded after an
	// early Nack.
	dropping uint64
}

// add takes one chunk. It returns the complete update after its last chunk,
// or a Nack when the chunks are out of order or too large.
func (a *assembler) add(u *federationpb.ShardUpdate) (*federationpb.ShardUpdate, *federationpb.Nack) {
	if a.dropping != 0 {
		if u.GetVersion() == a.dropping {
			if !u.GetMore() {
				a.dropping = 0
			}
			return nil, nil
		}
		a.dropping = 0
	}
	if p := a.pending; p != nil && (p.GetVersion() != u.GetVersion() || p.GetNonce() != u.GetNonce() || p.GetFull() != u.GetFull()) {
		// A spoke that starts another version before finishing this one is
		// broken; an unspecified code ends the stream and it resyncs.
		a.reset()
		return nil, &federationpb.Nack{
			Version: p.GetVersion(), Nonce: p.GetNonce(),
			Reason: fmt.Sprintf("version %d ended without its last chunk (version %d began)", p.GetVersion(), u.GetVersion()),
		}
	}
	if a.pending == nil {
		a.pending = u
	} else {
		p := a.pending
		if u.GetCluster() != nil {
			p.Cluster = u.GetCluster()
		}
		p.Services = append(p.Services, u.GetServices()...)
		p.Endpoints = append(p.Endpoints, u.GetEndpoints()...)
		p.Workloads = append(p.Workloads, u.GetWorkloads()...)
		p.RemovedServices = append(p.RemovedServices, u.GetRemovedServices()...)
		p.RemovedEndpoints = append(p.RemovedEndpoints, u.GetRemovedEndpoints()...)
		p.RemovedWorkloads = append(p.RemovedWorkloads, u.GetRemovedWorkloads()...)
		p.More = u.GetMore()
	}
	a.objects += len(u.GetServices()) + len(u.GetEndpoints()) + len(u.GetWorkloads()) +
		len(u.GetRemovedServices()) + len(u.GetRemovedEndpoints()) + len(u.GetRemovedWorkloads())
	if bound := a.bound(); bound > 0 && a.objects > bound {
		p := a.pending
		if p.GetMore() {
			a.dropping = p.GetVersion()
		}
		a.reset()
		return nil, &federationpb.Nack{
			Version: p.GetVersion(), Nonce: p.GetNonce(), Code: federationpb.NackCode_NACK_CODE_OVER_LIMIT,
			Reason: fmt.Sprintf("version %d carries more than %d objects, twice the hub's caps (services %d, endpoints %d, workloads %d)",
				p.GetVersion(), bound, a.limits.MaxServices, a.limits.MaxEndpoints, a.limits.MaxWorkloads),
		}
	}
	if a.pending.GetMore() {
		return nil, nil
	}
	done := a.pending
	a.reset()
	return done, nil
}

func (a *assembler) reset() { a.pending, a.objects = nil, 0 }

// bound is how many objects one update may carry: enough to replace every
// object the caps allow (upserts plus removals).
func (a *assembler) bound() int {
	if a.limits.MaxServices == 0 || a.limits.MaxEndpoints == 0 || a.limits.MaxWorkloads == 0 {
		return 0
	}
	return 2 * (a.limits.MaxServices + a.limits.MaxEndpoints + a.limits.MaxWorkloads)
}
