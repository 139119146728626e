package registry

import (
	"fmt"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// spokeID names a spoke process: its session, the same on every stream
// it opens, and the address of its current stream.
type spokeID struct{ session, peer string }

// displacedSpoke is a spoke whose stream another spoke took over.
type displacedSpoke struct {
	peer        string
	by          spokeID
	lastRefused time.Time // zero until it tried to come back
}

// maxDisplaced bounds the displaced spokes remembered per cluster; the
// oldest is forgotten first.
const maxDisplaced = 8

// duplicateWindow is how long after a displaced spoke last tried to come
// back the cluster is reported as having two spokes.
const duplicateWindow = time.Minute

// Conn is one stream's hold on a cluster's shard. Only the newest Conn of
// a cluster may write; older ones get ErrSuperseded.
type Conn struct {
	r          *Registry
	id         federation.ClusterID
	gen        uint64
	superseded chan struct{}
}

// Connect takes the cluster's shard for a new stream and supersedes the
// previous stream's Conn, if any.
func (r *Registry) Connect(id federation.ClusterID, build string) *Conn {
	c, _ := r.Claim(id, build, "", "")
	return c
}

// Claim is Connect for a stream of the spoke whose session is session
// (the same on all its streams) at address peer. A spoke of another
// session that takes over a live stream displaces that stream's spoke:
// the displaced spoke gets ErrHeld while the new one streams, so that two
// spokes running for one cluster do not take the stream from each other
// in turn. The newer one holds it, which is what a replaced spoke pod
// needs. An empty session never displaces nor is displaced.
func (r *Registry) Claim(id federation.ClusterID, build, session, peer string) (*Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.shards[id]
	if !ok {
		s = newShard(id)
		r.shards[id] = s
		r.membersChangedLocked()
	}
	now := r.now()
	if d, ok := s.displaced[session]; ok && session != "" {
		if s.status.Connected {
			d.lastRefused, d.peer = now, peer
			s.status.DuplicateRefusals++
			r.statusChangedLocked()
			return nil, fmt.Errorf("%w: the spoke at %s (session %s) took cluster %q over from this spoke (at %s, session %s) and still streams; two spokes run for one cluster: stop one",
				ErrHeld, s.holder.peer, s.holder.session, id, peer, session)
		}
		delete(s.displaced, session) // the other one has gone: this one may have it back
	}
	if s.status.Connected && session != "" && s.holder.session != "" && s.holder.session != session {
		s.displace(s.holder, spokeID{session, peer})
		s.status.Supersessions++
	}
	s.holder = spokeID{session, peer}
	s.status.Peer = peer
	if s.superseded != nil {
		close(s.superseded)
	}
	s.gen++
	s.superseded = make(chan struct{})
	s.status.Connected, s.status.Expected = true, false
	s.status.ConnectedSince = r.now()
	s.importer = false // until the new stream's spoke says it writes imports
	s.status.Build = build
	switch s.status.State {
	case clusterset.Stale:
		r.setStateLocked(s, clusterset.Live)
		r.publishLocked(changeSet{cluster: id, clusters: true, allServices: true})
	case clusterset.Withdrawn:
		// Nothing of it is held: it rejoins with its next full state.
		r.setStateLocked(s, clusterset.Live)
		s.cluster = nil
		r.membersChangedLocked()
	}
	if s.status.StateSince.IsZero() {
		s.status.StateSince = s.status.ConnectedSince
	}
	r.statusChangedLocked()
	r.wakeLeasesLocked()
	// A live cluster whose spoke reconnects changes nothing proxies see.
	return &Conn{r: r, id: id, gen: s.gen, superseded: s.superseded}, nil
}

// disconnectLocked ends a shard's hold by its stream: nothing can write
// through that stream's Conn any more, and the cluster's lease runs from
// now. Callers hold r.mu.
func (r *Registry) disconnectLocked(s *shard) {
	s.gen++
	s.status.Connected = false
	s.status.DisconnectedAt = r.now()
}

// displace remembers that by took the cluster over from old.
func (s *shard) displace(old, by spokeID) {
	if s.displaced == nil {
		s.displaced = map[string]*displacedSpoke{}
	}
	if len(s.displaced) >= maxDisplaced {
		var oldest string
		for k := range s.displaced {
			if oldest == "" || k < oldest {
				oldest = k // any will do; sessions are random
			}
		}
		delete(s.displaced, oldest)
	}
	s.displaced[old.session] = &displacedSpoke{peer: old.peer, by: by}
}

// duplicate describes the displaced spoke that tried last, within
// duplicateWindow of now, or "".
func (s *shard) duplicate(now time.Time) string {
	var last *displacedSpoke
	for _, d := range s.displaced {
		if !d.lastRefused.IsZero() && now.Sub(d.lastRefused) < duplicateWindow && (last == nil || d.lastRefused.After(last.lastRefused)) {
			last = d
		}
	}
	if last == nil || !s.status.Connected {
		return ""
	}
	return fmt.Sprintf("two spokes stream for this cluster: %s holds it, %s was refused %s ago", s.holder.peer, last.peer, now.Sub(last.lastRefused).Round(time.Second))
}

// Cluster is the cluster this Conn writes.
func (c *Conn) Cluster() federation.ClusterID { return c.id }

// Superseded is closed when a newer stream took the cluster over.
func (c *Conn) Superseded() <-chan struct{} { return c.superseded }

// owned returns the shard when c still owns it. Callers hold r.mu.
func (c *Conn) owned() (*shard, error) {
	s := c.r.shards[c.id]
	if s.gen != c.gen {
		return nil, fmt.Errorf("cluster %q: %w", c.id, ErrSuperseded)
	}
	return s, nil
}

// Close releases the shard. The cluster is marked disconnected unless a
// newer stream holds it; its shard stays, served under its lease.
func (c *Conn) Close() {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	s, err := c.owned()
	if err != nil {
		return
	}
	c.r.disconnectLocked(s)
	c.r.statusChangedLocked()
	// Its lease runs from now (RunLeases); until it turns stale, proxies
	// see no difference.
	c.r.wakeLeasesLocked()
}

// Resume reports whether the hub holds the spoke's session at a version
// between acked and sent, from which the spoke can send a delta.
func (c *Conn) Resume(session string, acked, sent uint64) (version uint64, ok bool) {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	s, err := c.owned()
	if err != nil || s.cluster == nil || session == "" || s.session != session {
		return 0, false
	}
	if s.version < acked || s.version > sent {
		return 0, false
	}
	return s.version, true
}

// RecordNack counts a rejected update in the cluster's status.
func (c *Conn) RecordNack(reason string) {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if s, err := c.owned(); err == nil {
		s.status.LastNack = c.r.now()
		s.status.LastNackReason = reason
		s.status.Nacks++
		c.r.statusChangedLocked()
	}
}

// Apply validates a complete update (all chunks merged) and applies it to
// the cluster's shard, whole or not at all. Errors wrap
// federation.ErrInvalid, federation.ErrOverLimit, ErrNoBase,
// ErrStaleVersion or ErrSuperseded.
func (c *Conn) Apply(session string, u *federationpb.ShardUpdate) error {
	if err := federation.ValidateUpdate(u); err != nil {
		return fmt.Errorf("cluster %q: version %d: %w", c.id, u.GetVersion(), err)
	}
	if cl := u.GetCluster(); cl != nil && federation.ClusterID(cl.GetId()) != c.id {
		return fmt.Errorf("cluster %q: version %d: %w", c.id, u.GetVersion(), &federation.ValidationError{
			Kind: "cluster", Key: cl.GetId(), Field: "id", Reason: fmt.Sprintf("is not this stream's cluster %q", c.id),
		})
	}
	r := c.r
	denied := r.checkPolicy(c.id, u)
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := c.owned()
	if err != nil {
		return err
	}
	if denied != nil {
		s.status.PolicyRefusals++
		r.statusChangedLocked()
		return fmt.Errorf("cluster %q: version %d: %w", c.id, u.GetVersion(), denied)
	}
	var changes changeSet
	if u.GetFull() {
		if u.GetCluster() == nil {
			return fmt.Errorf("cluster %q: version %d: %w", c.id, u.GetVersion(), &federation.ValidationError{
				Kind: "update", Field: "cluster", Reason: "required in a full update",
			})
		}
		if s.session == session && u.GetVersion() <= s.version {
			return fmt.Errorf("cluster %q: version %d after %d: %w", c.id, u.GetVersion(), s.version, ErrStaleVersion)
		}
		if err := r.checkLimits(c.id, len(u.GetServices()), len(u.GetEndpoints()), len(u.GetWorkloads())); err != nil {
			return err
		}
		s.intern = clusterset.NewInterner()
		changes = s.replace(u)
	} else {
		if s.cluster == nil || s.session != session {
			return fmt.Errorf("cluster %q: version %d: %w", c.id, u.GetVersion(), ErrNoBase)
		}
		if u.GetVersion() <= s.version {
			return fmt.Errorf("cluster %q: version %d after %d: %w", c.id, u.GetVersion(), s.version, ErrStaleVersion)
		}
		ns, ne, nw := s.countAfter(u)
		if err := r.checkLimits(c.id, ns, ne, nw); err != nil {
			return err
		}
		changes = s.patch(u)
	}
	s.session = session
	s.version = u.GetVersion()
	s.status.LastAck = r.now()
	if t := u.GetObservedTime(); t != nil {
		s.status.LastChangeAt, s.status.LastChangeObservedAt = s.status.LastAck, t.AsTime()
		changes.observed = t.AsTime()
	}
	r.statusChangedLocked()
	r.publishLocked(changes)
	return nil
}
