package registry

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/clustersetip"
	"github.com/meshfed/meshfed/hub/policy"
)

// Limits caps each cluster's shard. Zero means no cap.
type Limits struct {
	MaxServices  int
	MaxEndpoints int
	MaxWorkloads int
}

// LeasePolicy says how long the clusterset keeps serving a cluster whose
// spoke has gone: it turns stale StaleAfter after its stream ended, and is
// withdrawn WithdrawAfter after (0: never).
type LeasePolicy struct {
	StaleAfter, WithdrawAfter time.Duration
}

// DefaultLeasePolicy rides out a spoke restart or a brief partition at full
// priority, and keeps a lost cluster's endpoints as a last resort for ten
// minutes: long enough for an operator to notice, short enough that its
// pods' addresses are unlikely to have been reused.
var DefaultLeasePolicy = LeasePolicy{StaleAfter: 30 * time.Second, WithdrawAfter: 10 * time.Minute}

// Validate reports a policy that cannot be applied.
func (p LeasePolicy) Validate() error {
	if p.StaleAfter < 0 || p.WithdrawAfter < 0 {
		return fmt.Errorf("lease durations cannot be negative (stale after %v, withdraw after %v)", p.StaleAfter, p.WithdrawAfter)
	}
	if p.WithdrawAfter != 0 && p.WithdrawAfter < p.StaleAfter {
		return fmt.Errorf("withdraw after %v comes before stale after %v", p.WithdrawAfter, p.StaleAfter)
	}
	return nil
}

// Config configures a registry.
type Config struct {
	// Limits and Leases apply to every cluster whose policy entry sets
	// no other.
	Limits Limits
	Leases LeasePolicy
	// Policy bounds what each cluster may publish (nil: no policy, every
	// cluster is admitted and may publish anything valid). SetPolicy
	// replaces it.
	Policy *policy.Policy
	// Clock drives the leases (nil: the real clock).
	Clock clock.Clock
	// ClustersetPools are the CIDRs of MCS ClusterSetIPs (zero:
	// clustersetip.DefaultCIDRs).
	ClustersetPools clustersetip.Pools
	// Log receives a line each time a cluster's lease changes (nil: none).
	Log *slog.Logger
}

// Registry holds every cluster's shard and publishes clusterset snapshots.
type Registry struct {
	limits Limits
	leases LeasePolicy
	clock  clock.Clock
	now    func() time.Time
	log    *slog.Logger

	mu     sync.Mutex // serialises writers; readers use current
	shards map[federation.ClusterID]*shard
	// statusChanged is closed when a cluster's status changes (a
	// connection without data publishes no snapshot). It is made only
	// when someone watches: every accepted update changes a status.
	statusChanged chan struct{}
	// leaseWake is closed when a stream opens or ends, for RunLeases. It
	// is made only when RunLeases waits.
	leaseWake chan struct{}
	// membersChanged is closed when the membership changes (a cluster
	// added or withdrawn); made only when someone watches.
	membersChanged chan struct{}
	// members caches WatchMembers' answer until the membership changes:
	// every spoke's stream holds it, and at a thousand clusters a copy
	// each would be 16 MB.
	members []federation.ClusterID
	// membershipKnown: a spoke or the cluster policy has named the
	// clusterset's members (see Expect). Until then the hub cannot tell
	// a first start from a restart that only some spokes have reached.
	membershipKnown bool

	current atomic.Pointer[snapshot]
	// policy is read without r.mu by Apply's checks and written under it.
	policy atomic.Pointer[policy.Policy]

	imports importsState
}

// New returns an empty registry.
func New(cfg Config) *Registry {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ClustersetPools == (clustersetip.Pools{}) {
		cfg.ClustersetPools, _ = clustersetip.ParsePools(clustersetip.DefaultCIDRs)
	}
	r := &Registry{
		limits: cfg.Limits, leases: cfg.Leases, clock: cfg.Clock, now: cfg.Clock.Now, log: cfg.Log, shards: map[federation.ClusterID]*shard{},
		imports: importsState{
			pools:     cfg.ClustersetPools,
			ipImports: map[string]clustersetip.Import{},
			all:       map[string]struct{}{},
			assigned:  map[string]clustersetip.Result{},
		},
	}
	r.current.Store(emptySnapshot())
	if cfg.Policy != nil {
		r.SetPolicy(cfg.Policy)
	}
	return r
}

// Current returns the current snapshot. It never blocks.
func (r *Registry) Current() clusterset.Snapshot { return r.current.Load() }

// shard is one cluster's state at the hub. Guarded by Registry.mu.
type shard struct {
	id       federation.ClusterID
	cluster  *federationpb.Cluster // nil until the first full update
	session  string
	version  uint64
	services map[string]*federationpb.Service
	// endpoints holds each service's endpoints tagged and sorted by
	// address: the shard's only index of them (found by binary search),
	// and what snapshots share. A change makes a new slice; published
	// snapshots hold the old.
	endpoints map[string][]clusterset.TaggedEndpoint
	nEndpoint int
	// workloads are the shard's workloads by uid: the same index the
	// snapshots hold (they hold no other), so edits go through a
	// workloadsEdit and leave published ones alone.
	workloads workloads
	// tags are the shard's tags, made anew when its network changes:
	// every endpoint and workload of one network shares one.
	tags *clusterset.Tags

	gen        uint64 // generation of the owning Conn
	superseded chan struct{}
	// holder is the spoke of the newest stream; displaced are spokes
	// whose live streams a spoke of another session took over, and that
	// may not take the cluster back while it streams.
	holder    spokeID
	displaced map[string]*displacedSpoke // by session
	status    ClusterStatus
	intern    *clusterset.Interner
	// importer: the spoke of the current stream writes imports into its
	// cluster. held is what it last reported its cluster holds of them
	// (kept across streams: it is the cluster's, not the stream's).
	importer bool
	held     map[string]*federationpb.HeldImport
}

func newShard(id federation.ClusterID) *shard {
	return &shard{
		id:        id,
		services:  map[string]*federationpb.Service{},
		endpoints: map[string][]clusterset.TaggedEndpoint{},
		intern:    clusterset.NewInterner(),
	}
}

// workload returns the workload with uid, nil if the shard has none.
func (s *shard) workload(uid string) *clusterset.Workload {
	w, _ := s.workloads.get(uid)
	return w
}

// retagWorkloads gives every workload the tag of the shard's network.
func (s *shard) retagWorkloads() {
	edit := newWorkloadsEdit(&s.workloads)
	s.workloads.all(func(w *clusterset.Workload) { edit.set(s.intern.Retag(s.tags, w)) })
	s.workloads = edit.done()
}

// endpoint returns a service's endpoint at address.
func (s *shard) endpoint(key, address string) (*clusterset.Endpoint, bool) {
	eps := s.endpoints[key]
	i, ok := slices.BinarySearchFunc(eps, address, func(e clusterset.TaggedEndpoint, a string) int { return strings.Compare(e.GetAddress(), a) })
	if !ok {
		return nil, false
	}
	return eps[i].Endpoint, true
}

// editEndpoints applies a delta's endpoint changes of one service to its
// sorted slice, in O(n + k log k) instead of a rebuild. The old slice is
// left alone: published snapshots hold it.
func (s *shard) editEndpoints(key string, upserts []*clusterset.Endpoint, removed map[string]bool) {
	old := s.endpoints[key]
	drop := make(map[string]bool, len(removed)+len(upserts))
	for a := range removed {
		drop[a] = true
	}
	for _, e := range upserts {
		drop[e.GetAddress()] = true
	}
	add := clusterset.SortEndpoints(upserts) // tagged when interned
	out := make([]clusterset.TaggedEndpoint, 0, len(old)+len(add))
	i := 0
	for _, e := range old {
		if drop[e.GetAddress()] {
			continue
		}
		for i < len(add) && add[i].GetAddress() < e.GetAddress() {
			out = append(out, add[i])
			i++
		}
		out = append(out, e)
	}
	if out = append(out, add[i:]...); len(out) == 0 {
		delete(s.endpoints, key)
		return
	}
	s.endpoints[key] = out
}

// retag tags every endpoint of the shard anew, for a new network; the
// order by address stands.
func (s *shard) retag() {
	for key, eps := range s.endpoints {
		out := make([]clusterset.TaggedEndpoint, len(eps))
		for i, e := range eps {
			out[i] = clusterset.TaggedEndpoint{Endpoint: s.intern.RetagEndpoint(s.tags, e.Endpoint)}
		}
		s.endpoints[key] = out
	}
}

func (s *shard) network() federation.NetworkID { return federation.NetworkID(s.cluster.GetNetwork()) }

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

// ClusterStatus reports a cluster's connection, lease and shard, for
// operators.
type ClusterStatus struct {
	ID          federation.ClusterID `json:"id"`
	Network     string               `json:"network"`
	TrustDomain string               `json:"trustDomain,omitempty"`
	// State is the cluster's lease: live, stale or withdrawn.
	State      clusterset.ClusterState `json:"state"`
	StateSince time.Time               `json:"stateSince"`
	// LastSeen is when the hub last heard from the spoke: now while its
	// stream is up, else when the stream ended.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// StaleAt and WithdrawAt are when the lease will change, while the
	// spoke is gone.
	StaleAt    time.Time `json:"staleAt,omitzero"`
	WithdrawAt time.Time `json:"withdrawAt,omitzero"`
	// Expected: the cluster is a member the hub learned of (from another
	// spoke or the cluster policy) but has not heard from since it started.
	Expected       bool      `json:"expected,omitempty"`
	Connected      bool      `json:"connected"`
	ConnectedSince time.Time `json:"connectedSince,omitzero"`
	DisconnectedAt time.Time `json:"disconnectedAt,omitzero"`
	Session        string    `json:"session,omitempty"`
	Build          string    `json:"build,omitempty"`
	ShardVersion   uint64    `json:"shardVersion"`
	LastAck        time.Time `json:"lastAck,omitzero"`
	LastNack       time.Time `json:"lastNack,omitzero"`
	LastNackReason string    `json:"lastNackReason,omitempty"`
	Nacks          uint64    `json:"nacks"`
	// LastChangeAt is when the hub applied the newest update that carried
	// a change, and LastChangeObservedAt when the spoke saw that update's
	// oldest change (ShardUpdate.observed_time, read in the hub's clock
	// through the offset estimated on the spoke's stream). The
	// difference is how long the change took to reach the hub: unlike the
	// age of LastAck, it does not grow while an idle cluster stays in sync.
	LastChangeAt         time.Time `json:"lastChangeAt,omitzero"`
	LastChangeObservedAt time.Time `json:"lastChangeObservedAt,omitzero"`
	// PolicyRefusals counts updates refused because the cluster policy
	// does not allow something in them (each also a Nack).
	PolicyRefusals uint64 `json:"policyRefusals"`
	// Peer is the address of the current (or last) stream's spoke.
	Peer string `json:"peer,omitempty"`
	// Supersessions counts streams taken over by a spoke of another
	// session while they were up (a spoke pod replaced, or a second spoke).
	Supersessions uint64 `json:"supersessions"`
	// DuplicateRefusals counts streams refused because their spoke had
	// been displaced by another that still streams.
	DuplicateRefusals uint64 `json:"duplicateRefusals"`
	// Duplicate names the two spokes while a displaced spoke keeps trying
	// to stream for the cluster (within a minute of its last try).
	Duplicate string `json:"duplicate,omitempty"`
	Services  int    `json:"services"`
	Endpoints int    `json:"endpoints"`
	Workloads int    `json:"workloads"`
	Gateways  int    `json:"gateways"`
}

// Status returns every cluster's status, sorted by ID.
func (r *Registry) Status() []ClusterStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statusLocked()
}

// WatchStatus returns every cluster's status, sorted by ID, and a channel
// closed when it next changes.
func (r *Registry) WatchStatus() ([]ClusterStatus, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.statusChanged == nil {
		r.statusChanged = make(chan struct{})
	}
	return r.statusLocked(), r.statusChanged
}

// statusChangedLocked wakes the status watchers. Callers hold r.mu.
func (r *Registry) statusChangedLocked() {
	if r.statusChanged != nil {
		close(r.statusChanged)
		r.statusChanged = nil
	}
}

func (r *Registry) statusLocked() []ClusterStatus {
	out := make([]ClusterStatus, 0, len(r.shards))
	now := r.now()
	for _, s := range r.shards {
		st := s.status
		switch {
		case st.Connected:
			st.LastSeen = now
		case st.Expected: // never heard from since this hub started
			st.StaleAt, st.WithdrawAt = r.leaseDeadlines(s)
		default:
			st.LastSeen = st.DisconnectedAt
			st.StaleAt, st.WithdrawAt = r.leaseDeadlines(s)
		}
		st.ID = s.id
		st.Duplicate = s.duplicate(now)
		st.Network = s.cluster.GetNetwork()
		st.TrustDomain = s.cluster.GetTrustDomain()
		st.Session = s.session
		st.ShardVersion = s.version
		st.Services = len(s.services)
		st.Endpoints = s.nEndpoint
		st.Workloads = s.workloads.len
		st.Gateways = len(s.cluster.GetGateways())
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

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

func (r *Registry) checkLimits(id federation.ClusterID, services, endpoints, workloads int) error {
	l := r.LimitsFor(id)
	for _, c := range []struct {
		kind     string
		n, limit int
	}{
		{"services", services, l.MaxServices},
		{"endpoints", endpoints, l.MaxEndpoints},
		{"workloads", workloads, l.MaxWorkloads},
	} {
		if c.limit > 0 && c.n > c.limit {
			return fmt.Errorf("cluster %q: %d %s exceed the hub's cap of %d per cluster: %w", id, c.n, c.kind, c.limit, federation.ErrOverLimit)
		}
	}
	return nil
}

// changeSet accumulates what an update touched.
type changeSet struct {
	cluster   federation.ClusterID
	services  map[string]struct{}
	workloads map[string]struct{} // shard uids, not yet cluster-qualified
	clusters  bool
	// all marks every service and workload of the shard changed (its
	// network changed).
	all bool
	// allServices marks every service of the shard changed (its lease
	// changed how its endpoints are served).
	allServices bool
	// held are the keys of the imports whose holdings the cluster
	// reported changed.
	held map[string]struct{}
	// observed is when the spoke observed the update's oldest change.
	observed time.Time
}

func (c *changeSet) service(key string) {
	if c.services == nil {
		c.services = map[string]struct{}{}
	}
	c.services[key] = struct{}{}
}

func (c *changeSet) workload(uid string) {
	if c.workloads == nil {
		c.workloads = map[string]struct{}{}
	}
	c.workloads[uid] = struct{}{}
}

// setCluster records new cluster facts.
func (s *shard) setCluster(cl *federationpb.Cluster, ch *changeSet) {
	if s.cluster.EqualVT(cl) {
		return
	}
	prev := s.cluster
	s.cluster = cl
	ch.clusters = true
	if prev == nil || prev.GetNetwork() != cl.GetNetwork() {
		s.tags = clusterset.NewTags(s.id, s.network())
	}
	if prev != nil && prev.GetNetwork() != cl.GetNetwork() {
		ch.all = true
		s.retag()
		s.retagWorkloads()
	}
}

// replace swaps the shard's objects for a full update's, recording only the
// objects that differ.
func (s *shard) replace(u *federationpb.ShardUpdate) changeSet {
	ch := changeSet{cluster: s.id}
	s.setCluster(u.GetCluster(), &ch)

	services := make(map[string]*federationpb.Service, len(u.GetServices()))
	for _, svc := range u.GetServices() {
		k := federation.KeyOfService(svc)
		services[k] = svc
		if old, ok := s.services[k]; !ok || !old.EqualVT(svc) {
			ch.service(k)
		} else {
			services[k] = old // keep the pointer snapshots already share
		}
	}
	for k := range s.services {
		if _, ok := services[k]; !ok {
			ch.service(k)
		}
	}
	s.services = services

	ws := make([]*clusterset.Workload, 0, len(u.GetWorkloads()))
	for _, pb := range u.GetWorkloads() {
		w := s.intern.Workload(s.tags, pb)
		if old, ok := s.workloads.get(w.GetUid()); !ok || !old.Equal(w) {
			ch.workload(w.GetUid())
		} else {
			w = old // the pointer snapshots already share
		}
		ws = append(ws, w)
	}
	next := newWorkloads(ws)
	s.workloads.all(func(w *clusterset.Workload) {
		if _, ok := next.get(w.GetUid()); !ok {
			ch.workload(w.GetUid())
		}
	})
	s.workloads = next

	byService := map[string][]*clusterset.Endpoint{}
	for _, pb := range u.GetEndpoints() {
		sk := federation.ServiceKey(pb.GetNamespace(), pb.GetService())
		ep := s.intern.Endpoint(s.tags, pb, s.workload(pb.GetWorkload().GetUid()))
		if old, ok := s.endpoint(sk, ep.GetAddress()); ok && old.Equal(ep) {
			ep = old // the pointer snapshots already share
		}
		byService[sk] = append(byService[sk], ep)
	}
	endpoints := make(map[string][]clusterset.TaggedEndpoint, len(byService))
	for sk, eps := range byService {
		tagged := clusterset.SortEndpoints(eps) // tagged when interned
		if old := s.endpoints[sk]; slices.Equal(old, tagged) {
			tagged = old // unchanged: the slice snapshots already share
		} else {
			ch.service(sk)
		}
		endpoints[sk] = tagged
	}
	for sk := range s.endpoints {
		if _, ok := endpoints[sk]; !ok {
			ch.service(sk)
		}
	}
	s.endpoints = endpoints
	s.nEndpoint = len(u.GetEndpoints())
	return ch
}

// countAfter returns the shard's sizes after a delta, for limit checks.
func (s *shard) countAfter(u *federationpb.ShardUpdate) (services, endpoints, workloads int) {
	services, endpoints, workloads = len(s.services), s.nEndpoint, s.workloads.len
	for _, svc := range u.GetServices() {
		if _, ok := s.services[federation.KeyOfService(svc)]; !ok {
			services++
		}
	}
	for _, k := range u.GetRemovedServices() {
		if _, ok := s.services[k]; ok {
			services--
		}
	}
	for _, ep := range u.GetEndpoints() {
		if _, ok := s.endpoint(federation.ServiceKey(ep.GetNamespace(), ep.GetService()), ep.GetAddress()); !ok {
			endpoints++
		}
	}
	for _, k := range u.GetRemovedEndpoints() {
		if _, ok := s.endpoint(federation.SplitEndpointKey(k)); ok {
			endpoints--
		}
	}
	for _, w := range u.GetWorkloads() {
		if _, ok := s.workloads.get(w.GetUid()); !ok {
			workloads++
		}
	}
	for _, k := range u.GetRemovedWorkloads() {
		if _, ok := s.workloads.get(k); ok {
			workloads--
		}
	}
	return services, endpoints, workloads
}

// patch applies a delta in place.
func (s *shard) patch(u *federationpb.ShardUpdate) changeSet {
	ch := changeSet{cluster: s.id}
	if cl := u.GetCluster(); cl != nil {
		s.setCluster(cl, &ch)
	}
	for _, k := range u.GetRemovedServices() {
		if _, ok := s.services[k]; ok {
			delete(s.services, k)
			ch.service(k)
		}
	}
	for _, svc := range u.GetServices() {
		k := federation.KeyOfService(svc)
		if !s.services[k].EqualVT(svc) {
			s.services[k] = svc
			ch.service(k)
		}
	}
	if len(u.GetRemovedWorkloads()) > 0 || len(u.GetWorkloads()) > 0 {
		workloads := newWorkloadsEdit(&s.workloads)
		for _, uid := range u.GetRemovedWorkloads() {
			if workloads.get(uid) != nil {
				workloads.delete(uid)
				ch.workload(uid)
			}
		}
		for _, pb := range u.GetWorkloads() {
			if w := s.intern.Workload(s.tags, pb); !workloads.get(w.GetUid()).Equal(w) {
				workloads.set(w)
				ch.workload(w.GetUid())
			}
		}
		s.workloads = workloads.done()
	}
	type edit struct {
		upserts []*clusterset.Endpoint
		removed map[string]bool // addresses
	}
	edits := map[string]*edit{}
	editOf := func(sk string) *edit {
		e := edits[sk]
		if e == nil {
			e = &edit{removed: map[string]bool{}}
			edits[sk] = e
		}
		return e
	}
	for _, ek := range u.GetRemovedEndpoints() {
		sk, a := federation.SplitEndpointKey(ek)
		if _, ok := s.endpoint(sk, a); ok {
			s.nEndpoint--
			ch.service(sk)
			editOf(sk).removed[a] = true
		}
	}
	for _, pb := range u.GetEndpoints() {
		sk := federation.ServiceKey(pb.GetNamespace(), pb.GetService())
		ep := s.intern.Endpoint(s.tags, pb, s.workload(pb.GetWorkload().GetUid()))
		old, ok := s.endpoint(sk, ep.GetAddress())
		if !ok {
			s.nEndpoint++
		}
		if !ok || !old.Equal(ep) {
			ch.service(sk)
			editOf(sk).upserts = append(editOf(sk).upserts, ep)
		}
	}
	for sk, e := range edits {
		s.editEndpoints(sk, e.upserts, e.removed)
	}
	return ch
}

// publishLocked publishes a snapshot with the changes of one shard (or
// only cluster facts). Callers hold r.mu.
func (r *Registry) publishLocked(ch changeSet) {
	prev := r.current.Load()
	next := &snapshot{
		revision: prev.revision + 1, done: make(chan struct{}),
		clusters: prev.clusters, clusterList: prev.clusterList, gateways: prev.gateways, imports: prev.imports,
	}
	next.changes.Observed = ch.observed
	if ch.clusters {
		// Clusters are few: rebuild them whenever one changes.
		clusters := make(map[federation.ClusterID]*clusterset.ClusterInfo, len(r.shards))
		for id, s := range r.shards {
			if s.cluster != nil && s.status.State != clusterset.Withdrawn {
				clusters[id] = &clusterset.ClusterInfo{
					ID:          id,
					Network:     s.network(),
					TrustDomain: s.cluster.GetTrustDomain(),
					Gateways:    s.cluster.GetGateways(),
					State:       s.status.State,
				}
			}
		}
		next.setClusters(clusters)
		next.changes.Clusters = true
	}
	if ch.all || ch.allServices {
		s := r.shards[ch.cluster]
		for k := range s.services {
			ch.service(k)
		}
		if ch.all {
			// The shard's network changed: retag everything it holds.
			s.workloads.all(func(w *clusterset.Workload) { ch.workload(w.GetUid()) })
		}
	}
	next.services = r.mergeServices(&prev.services, ch.services, &next.changes)
	next.workloads, next.nWorkloads = prev.workloads, prev.nWorkloads
	if len(ch.workloads) > 0 {
		s := r.shards[ch.cluster]
		next.workloads = maps.Clone(prev.workloads)
		next.workloads[ch.cluster] = s.workloads
		next.nWorkloads += s.workloads.len - prev.workloads[ch.cluster].len
		next.changes.Workloads = workloadKeys(s, ch.workloads)
	}
	r.resolveImportsLocked(next, ch.held)
	if len(next.changes.Services) == 0 && len(next.changes.Workloads) == 0 && !next.changes.Clusters {
		return // nothing a reader could see changed
	}
	prev.next = next
	r.current.Store(next)
	close(prev.done)
}

// mergeServices re-merges the services with the given keys from every shard.
func (r *Registry) mergeServices(base *cowMap[*clusterset.ServiceView], keys map[string]struct{}, out *clusterset.Changes) cowMap[*clusterset.ServiceView] {
	if len(keys) == 0 {
		return *base
	}
	edit := newCowEdit(base)
	for key := range keys {
		var parts []clusterset.ClusterService
		for id, s := range r.shards {
			svc, ok := s.services[key]
			if !ok {
				continue
			}
			parts = append(parts, clusterset.ClusterService{
				Cluster:   id,
				Network:   s.network(),
				Service:   svc,
				Endpoints: s.endpoints[key],
				Stale:     s.status.State == clusterset.Stale,
			})
		}
		if v := clusterset.MergeService(parts); v != nil {
			edit.set(key, v)
		} else {
			edit.delete(key)
		}
		out.Services = append(out.Services, key)
	}
	slices.Sort(out.Services)
	return edit.done()
}

// workloadKeys returns the clusterset keys of a shard's workloads with the
// given uids, sorted.
func workloadKeys(s *shard, uids map[string]struct{}) []string {
	out := make([]string, 0, len(uids))
	for uid := range uids {
		if w, ok := s.workloads.get(uid); ok {
			out = append(out, w.Key()) // the workload's own string: no key built per workload
		} else {
			out = append(out, clusterset.WorkloadKey(s.id, uid))
		}
	}
	slices.Sort(out)
	return out
}
