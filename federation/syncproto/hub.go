package syncproto

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/recvloop"
)

// Conn is a stream's hold on its cluster's shard in the hub's registry
// (hub/registry.Conn is one).
type Conn interface {
	// Resume reports whether the hub holds the session's shard at a version
	// between acked and sent, from which the spoke can send a delta.
	Resume(session string, acked, sent uint64) (version uint64, ok bool)
	// Apply applies a complete update, whole or not at all.
	Apply(session string, u *federationpb.ShardUpdate) error
	// RecordNack counts a rejected update in the cluster's status.
	RecordNack(reason string)
	// Superseded is closed when a newer stream took the cluster over.
	Superseded() <-chan struct{}
	// SetImporter records that the spoke writes imports into its cluster.
	SetImporter()
	// ApplyHeld applies a complete report of the imports the cluster
	// holds, whole or not at all.
	ApplyHeld(h *federationpb.ImportsHeld) error
	// Close releases the shard.
	Close()
}

// Connector takes a cluster's shard for a new stream, superseding the
// previous stream's Conn, or says why the stream may not have it (the
// error's message goes to the spoke). ctx is the stream's.
type Connector func(ctx context.Context, id federation.ClusterID, hello *federationpb.Hello) (Conn, error)

// HubObserver learns what one hub session does, for logs and metrics. Its
// methods run on the session's goroutine and must not block.
type HubObserver interface {
	// Connected: the spoke's Hello is answered with welcome (called just
	// before it is sent).
	Connected(hello *federationpb.Hello, welcome *federationpb.Welcome)
	// Received: a message carrying a chunk arrived.
	Received(m *federationpb.SpokeMessage)
	// Applied: a complete update was applied and is being acknowledged.
	Applied(u *federationpb.ShardUpdate)
	// Rejected: an update was rejected; a Nack with an unspecified code
	// ends the stream instead of being sent.
	Rejected(n *federationpb.Nack)
}

// Membership is the clusterset's membership as the hub knows it
// (hub/registry.Registry is one).
type Membership interface {
	// WatchMembers returns the members, sorted, and a channel closed when
	// they next change.
	WatchMembers() ([]federation.ClusterID, <-chan struct{})
	// Expect records members a spoke named that the hub has not heard of.
	Expect(ids []federation.ClusterID) int
}

// Limits caps each cluster's shard, as the registry does. Zero means no cap.
type Limits struct {
	MaxServices, MaxEndpoints, MaxWorkloads int
}

// HubConfig configures the hub's sessions.
type HubConfig struct {
	// MaxMessageBytes is announced to spokes so that they chunk below it.
	MaxMessageBytes int
	// HubID names this hub replica in Welcome messages.
	HubID string
	// Build is the hub's build, sent in Welcome messages.
	Build string
	// Clusterset names the clusterset the hub serves: a spoke whose
	// cluster is a member of another (Hello.clusterset) is refused. Empty:
	// every spoke is taken.
	Clusterset string
	Limits     Limits
	// LimitsFor, when set, gives a cluster's own caps in place of Limits.
	LimitsFor func(federation.ClusterID) Limits
	// Admit, when set, refuses a stream for a cluster (after its
	// credential was checked) by returning why.
	Admit func(federation.ClusterID) error
	// NackCode gives the code of a Nack for an error of [Conn.Apply] other
	// than federation's (a *federation.ValidationError, or one wrapping
	// federation.ErrOverLimit). NACK_CODE_UNSPECIFIED ends the stream.
	NackCode func(error) federationpb.NackCode
	// Members, when set, learns members from each Hello and keeps every
	// spoke told of the membership (Members messages).
	Members Membership
	// Imports, when set, gives the stream of a spoke that writes imports
	// (Hello.imports) the imports its cluster should hold; every federated
	// service when the spoke serves a mesh (Hello.mesh), and more when it
	// serves remote views.
	Imports func(id federation.ClusterID, want ImportsWanted) ImportsFeed
	// Now is the hub's clock (nil: time.Now).
	Now func() time.Time
}

// Hub runs the hub's side of every spoke's stream.
type Hub struct {
	cfg     HubConfig
	connect Connector

	// members is the Members message of membership membersOf (the
	// slice Membership shares until it changes), built once for every
	// stream.
	membersMu sync.Mutex
	membersOf []federation.ClusterID
	members   *federationpb.HubMessage

	mu sync.Mutex
	// unsound holds, per cluster, the session whose shard the hub may hold
	// incomplete (a chunk of an applied update arrived after its last
	// chunk). The hub does not resume it; a full update clears it.
	unsound map[federation.ClusterID]string
}

// NewHub returns a hub writing shards through connect.
func NewHub(cfg HubConfig, connect Connector) *Hub {
	return &Hub{cfg: cfg, connect: connect, unsound: map[federation.ClusterID]string{}}
}

var errNoHello = &streamError{kind: ErrBadHello, msg: "the first message of a stream must be Hello"}

// Serve runs the protocol on one stream until it ends. bound is the
// cluster the stream's credential is bound to ("" binds none: the Hello's
// claim is taken as is). Errors of the transport are returned as they are;
// the others wrap this package's errors. Serve returns without waiting for
// its receiver, which returns once the stream has ended: a gRPC server
// stream ends only when its handler returns.
func (h *Hub) Serve(ctx context.Context, t HubTransport, bound federation.ClusterID, obs HubObserver) error {
	first, err := t.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return errNoHello
	}
	id := federation.ClusterID(hello.GetClusterId())
	if err := federation.ValidateCluster(&federationpb.Cluster{Id: string(id)}); err != nil {
		return &streamError{kind: ErrBadHello, msg: "hello: " + err.Error(), cause: err}
	}
	if v := spokeProtocol(hello); v < MinProtocolVersion || v > ProtocolVersion {
		return &streamError{kind: ErrProtocolVersion, msg: fmt.Sprintf(
			"cluster %q: the spoke (build %q) speaks sync protocol version %d; this hub (build %q) speaks %d to %d: upgrade hubs before spokes",
			id, hello.GetBuild(), v, h.cfg.Build, MinProtocolVersion, ProtocolVersion)}
	}
	if bound != "" && bound != id {
		return &ClusterMismatchError{Bound: bound, Claimed: id}
	}
	if cs := hello.GetClusterset(); cs != "" && h.cfg.Clusterset != "" && cs != h.cfg.Clusterset {
		return &streamError{kind: ErrOtherClusterset, msg: fmt.Sprintf(
			"cluster %q is a member of clusterset %q (its ClusterProperty clusterset.k8s.io); this hub serves clusterset %q (--clusterset)",
			id, cs, h.cfg.Clusterset)}
	}
	if h.cfg.Admit != nil {
		if err := h.cfg.Admit(id); err != nil {
			return &streamError{kind: ErrNotAdmitted, msg: fmt.Sprintf("cluster %q: %v", id, err), cause: err}
		}
	}
	limits := h.limits(id)
	if h.cfg.Members != nil && len(hello.GetMembers()) > 0 {
		ids := make([]federation.ClusterID, 0, len(hello.GetMembers()))
		for _, m := range hello.GetMembers() {
			ids = append(ids, federation.ClusterID(m))
		}
		h.cfg.Members.Expect(ids)
	}
	conn, err := h.connect(ctx, id, hello)
	if err != nil {
		return &streamError{kind: ErrNotAdmitted, msg: fmt.Sprintf("cluster %q: %v", id, err), cause: err}
	}
	defer conn.Close()
	welcome := h.welcome(conn, id, hello, limits)
	// Observed before the spoke can see the Welcome: what the hub reports
	// is never behind what the spoke knows.
	obs.Connected(hello, welcome)
	if err := t.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Welcome{Welcome: welcome}}); err != nil {
		return err
	}

	// The reader stops with the session. Its context is the stream's
	// child: when the stream is canceled, the stream's context reports it
	// before the child does (a context closes its Done before it cancels
	// its children), so the loop below asks the stream's.
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &hubSession{Hub: h, t: t, conn: conn, id: id, session: hello.GetSession(), obs: obs, a: assembler{limits: limits}, now: h.cfg.Now}
	if s.now == nil {
		s.now = time.Now
	}
	r := recvloop.Start(readCtx, t.Recv)
	var sent *federationpb.HubMessage
	var membersChanged <-chan struct{}
	var tellAfter <-chan time.Time
	pause := time.NewTimer(membersPause)
	pause.Stop()
	defer pause.Stop()
	tellMembers := func() error {
		var m *federationpb.HubMessage
		m, membersChanged = h.membersMessage()
		if m == sent {
			return nil
		}
		sent = m
		return t.Send(m)
	}
	if h.cfg.Members != nil {
		if err := tellMembers(); err != nil {
			return err
		}
	}
	var feed ImportsFeed
	var feedReady <-chan struct{}
	if (hello.GetImports() || hello.GetMesh() || hello.GetRemoteViews()) && h.cfg.Imports != nil {
		if hello.GetImports() {
			conn.SetImporter()
		}
		feed = h.cfg.Imports(id, ImportsWanted{Mesh: hello.GetMesh() || hello.GetRemoteViews(), RemoteViews: hello.GetRemoteViews()})
		feedReady = feed.Ready()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-membersChanged:
			// Coalesced: when a thousand spokes connect, each stream tells
			// its spoke the membership a few times, not a thousand.
			membersChanged = nil
			pause.Reset(membersPause)
			tellAfter = pause.C
		case <-tellAfter:
			tellAfter = nil
			if err := tellMembers(); err != nil {
				return err
			}
		case <-feedReady:
			for _, im := range feed.Next(h.cfg.MaxMessageBytes) {
				if err := t.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Imports{Imports: im}}); err != nil {
					return err
				}
			}
			feedReady = feed.Ready()
		case <-conn.Superseded():
			return ErrSuperseded
		case <-r.Done():
			if err := ctx.Err(); err != nil {
				return err // the stream was canceled, whichever noticed first
			}
			return &streamError{kind: ErrSpokeGone, msg: r.Err().Error(), cause: r.Err()}
		case m := <-r.Msgs():
			if err := s.receive(m); err != nil {
				return err
			}
		}
	}
}

func (h *Hub) limits(id federation.ClusterID) Limits {
	if h.cfg.LimitsFor != nil {
		return h.cfg.LimitsFor(id)
	}
	return h.cfg.Limits
}

func (h *Hub) welcome(conn Conn, id federation.ClusterID, hello *federationpb.Hello, l Limits) *federationpb.Welcome {
	version, resume := conn.Resume(hello.GetSession(), hello.GetAckedVersion(), hello.GetSentVersion())
	if resume && h.isUnsound(id, hello.GetSession()) {
		version, resume = 0, false
	}
	return &federationpb.Welcome{
		Resume:     resume,
		Version:    version,
		HubId:      h.cfg.HubID,
		Build:      h.cfg.Build,
		Clusterset: h.cfg.Clusterset,
		// The spoke's version: a hub speaks each version it accepts as
		// that version does.
		ProtocolVersion: spokeProtocol(hello),
		Limits: &federationpb.Limits{
			MaxMessageBytes: uint32(h.cfg.MaxMessageBytes),
			MaxServices:     uint32(l.MaxServices),
			MaxEndpoints:    uint32(l.MaxEndpoints),
			MaxWorkloads:    uint32(l.MaxWorkloads),
		},
	}
}

func (h *Hub) isUnsound(id federation.ClusterID, session string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.unsound[id]
	return ok && s == session
}

func (h *Hub) setUnsound(id federation.ClusterID, session string, unsound bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if unsound {
		h.unsound[id] = session
	} else {
		delete(h.unsound, id)
	}
}

// hubSession is the state of one welcomed stream.
type hubSession struct {
	*Hub
	t       HubTransport
	conn    Conn
	id      federation.ClusterID
	session string
	obs     HubObserver
	a       assembler
	held    heldAssembler
	// The last versions whose last chunk arrived on this stream, and the
	// last applied.
	completed, applied uint64
	now                func() time.Time
	// offset estimates the hub's clock minus the spoke's: the smallest
	// receive time minus send time of the stream's chunks, which is the
	// offset plus the stream's shortest one-way delay (see ClockOffset).
	offset     time.Duration
	haveOffset bool
}

// receive takes one message of the spoke's.
func (s *hubSession) receive(m *federationpb.SpokeMessage) error {
	if h := m.GetHeld(); h != nil {
		s.receiveHeld(h)
		return nil
	}
	u := m.GetUpdate()
	if u == nil {
		return nil // a second Hello, or a kind this hub does not know yet
	}
	s.obs.Received(m)
	if sent := u.GetSentTime(); sent != nil {
		if d := s.now().Sub(sent.AsTime()); !s.haveOffset || d < s.offset {
			s.offset, s.haveOffset = d, true
		}
	}
	if s.completed != 0 && u.GetMore() && u.GetVersion() <= s.completed {
		// Every chunk of an update comes before its last one: the update
		// taken as this version lacked this chunk. The spoke resends it on
		// a new stream; when it was applied, as its full state.
		if u.GetVersion() <= s.applied {
			s.setUnsound(s.id, s.session, true)
		}
		return s.reject(&federationpb.Nack{
			Version: u.GetVersion(), Nonce: u.GetNonce(),
			Reason: fmt.Sprintf("a chunk of version %d arrived after its last chunk", u.GetVersion()),
		})
	}
	complete, nack := s.a.add(u)
	if nack == nil && complete == nil {
		return nil // more chunks to come
	}
	if complete != nil {
		s.completed = complete.GetVersion()
	}
	if nack == nil {
		s.toHubClock(complete)
		nack = s.apply(complete)
	}
	if nack != nil {
		return s.reject(nack)
	}
	s.applied = complete.GetVersion()
	if complete.GetFull() {
		s.setUnsound(s.id, "", false)
	}
	s.obs.Applied(complete)
	ack := &federationpb.Ack{Version: complete.GetVersion(), Nonce: complete.GetNonce()}
	return s.t.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Ack{Ack: ack}})
}

// apply applies a complete update and returns a Nack when it was rejected.
func (s *hubSession) apply(u *federationpb.ShardUpdate) *federationpb.Nack {
	err := s.conn.Apply(s.session, u)
	if err == nil {
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
	case s.cfg.NackCode != nil:
		nack.Code = s.cfg.NackCode(err)
	}
	return nack
}

// reject answers a rejected update with its Nack, or ends the stream for
// a Nack with an unspecified code.
func (s *hubSession) reject(n *federationpb.Nack) error {
	s.conn.RecordNack(n.GetReason())
	s.obs.Rejected(n)
	if n.GetCode() == federationpb.NackCode_NACK_CODE_UNSPECIFIED {
		return &streamError{kind: ErrReset, msg: n.GetReason()}
	}
	return s.t.Send(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Nack{Nack: n}})
}

// receiveHeld takes one chunk of a report of the imports the cluster
// holds. A report the hub cannot take is counted in the cluster's status
// and leaves the last good one in place; the spoke's next full report
// (on its next stream) replaces it.
func (s *hubSession) receiveHeld(h *federationpb.ImportsHeld) {
	complete, err := s.held.add(h)
	if err == nil && complete != nil {
		err = s.conn.ApplyHeld(complete)
	}
	if err != nil {
		s.conn.RecordNack(err.Error())
	}
}

// toHubClock rewrites an update's observed time from the spoke's clock to
// the hub's, by the stream's offset estimate. The estimate exceeds the
// true offset by the stream's shortest one-way delay, so the time read is
// at most that much late: a propagation time measured from it is short by
// at most that delay (microseconds on a LAN), never long. An update from
// a spoke that stamps no send time keeps its observed time.
func (s *hubSession) toHubClock(u *federationpb.ShardUpdate) {
	if t := u.GetObservedTime(); t != nil && s.haveOffset {
		u.ObservedTime = timestamppb.New(t.AsTime().Add(s.offset))
	}
}

// membersPause is how long a stream waits, after the membership changed,
// before it tells its spoke: the changes of that time go in one message.
const membersPause = time.Second

// membersMessage returns the Members message of the current membership,
// one message per membership for every stream (the spokes' streams only
// read it), and the channel closed when the membership changes.
func (h *Hub) membersMessage() (*federationpb.HubMessage, <-chan struct{}) {
	members, changed := h.cfg.Members.WatchMembers()
	h.membersMu.Lock()
	defer h.membersMu.Unlock()
	if h.members == nil || !sameSlice(members, h.membersOf) && !slices.Equal(members, h.membersOf) {
		m := &federationpb.Members{Clusters: make([]string, len(members))}
		for i, id := range members {
			m.Clusters[i] = string(id)
		}
		h.members = &federationpb.HubMessage{Kind: &federationpb.HubMessage_Members{Members: m}}
	}
	h.membersOf = members
	return h.members, changed
}

// sameSlice reports whether a and b are one slice.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
