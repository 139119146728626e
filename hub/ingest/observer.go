package ingest

import (
	"log/slog"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
)

// observer logs one stream's session and records its metrics.
type observer struct {
	s    *Server
	id   federation.ClusterID // "" until the spoke is connected
	peer string
	log  *slog.Logger
}

var _ syncproto.HubObserver = (*observer)(nil)

// Connected implements syncproto.HubObserver.
func (o *observer) Connected(hello *federationpb.Hello, welcome *federationpb.Welcome) {
	o.id = federation.ClusterID(hello.GetClusterId())
	o.log = o.s.log.With("cluster", o.id, "session", hello.GetSession())
	o.s.metrics.connected(o.id, 1)
	o.log.Info("spoke connected", "resume", welcome.GetResume(), "version", welcome.GetVersion(), "build", hello.GetBuild())
}

// Received implements syncproto.HubObserver.
func (o *observer) Received(m *federationpb.SpokeMessage) {
	if o.s.metrics != nil {
		o.s.metrics.received(o.id, proto.Size(m))
	}
}

// Applied implements syncproto.HubObserver.
func (o *observer) Applied(u *federationpb.ShardUpdate) {
	o.log.Debug("update applied", "version", u.GetVersion(), "full", u.GetFull(),
		"services", len(u.GetServices()), "endpoints", len(u.GetEndpoints()), "workloads", len(u.GetWorkloads()))
	o.s.metrics.update(o.id, "ack")
	if t := u.GetObservedTime(); t != nil {
		o.s.metrics.observeDelay(o.s.now().Sub(t.AsTime()))
	}
}

// Rejected implements syncproto.HubObserver.
func (o *observer) Rejected(n *federationpb.Nack) {
	o.s.metrics.update(o.id, "nack")
	o.log.Warn("update rejected", "version", n.GetVersion(), "code", n.GetCode(), "reason", n.GetReason())
}
