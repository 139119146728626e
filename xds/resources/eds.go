package resources

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// MetadataNamespace is the filter_metadata key under which every
// lb_endpoint carries {cluster, network}: where the endpoint lives, or for a
// gateway, the network it leads to.
const MetadataNamespace = "meshfed"

// Proximity ranks of a locality relative to the proxy's, before priorities
// are renumbered to be contiguous. A stale cluster's endpoints rank after
// every live one's, by the same proximities: rank + numProximities.
const (
	sameZone = iota
	sameRegion
	elsewhere
	numProximities
	numRanks = 2 * numProximities
)

// maxTotalWeight bounds the sum of all weights in one assignment. Envoy and
// grpc-go reject a locality or priority whose weights sum past MaxUint32;
// staying below 2^31 keeps every such sum valid with room to spare.
const maxTotalWeight = 1<<31 - 1

// Health is an lb_endpoint's health_status, numbered as Envoy's
// HealthStatus.
type Health int32

// The health statuses the hub sends (and UNKNOWN, the zero value).
const (
	HealthUnknown  Health = 0
	HealthHealthy  Health = 1
	HealthDraining Health = 3
)

// String is Envoy's name of the status, as its enum prints it.
func (h Health) String() string {
	switch h {
	case HealthUnknown:
		return "UNKNOWN"
	case HealthHealthy:
		return "HEALTHY"
	case HealthDraining:
		return "DRAINING"
	}
	return strconv.Itoa(int(h))
}

// LoadAssignment is an EDS resource (a ClusterLoadAssignment) as plain
// values: what EncodeLoadAssignment encodes, for callers that read an
// assignment rather than serve it.
type LoadAssignment struct {
	ClusterName string
	// Localities are ordered by priority, then locality.
	Localities []LocalityEndpoints
}

// LocalityEndpoints is one LocalityLbEndpoints of an assignment.
type LocalityEndpoints struct {
	Locality Locality
	Priority uint32
	// Weight is the locality's load_balancing_weight: the sum of its
	// endpoints' weights.
	Weight uint32
	// Endpoints are ordered by address, then port.
	Endpoints []LbEndpoint
}

// LbEndpoint is one lb_endpoint: a socket address, its health and weight,
// and its metadata under MetadataNamespace.
type LbEndpoint struct {
	Address string
	Port    uint32
	Health  Health
	Weight  uint32
	// Cluster and Network are where the endpoint lives; a gateway has the
	// network it leads to and no cluster.
	Cluster federation.ClusterID
	Network federation.NetworkID
}

// Assignment returns the assignment that EncodeLoadAssignment encodes, as
// plain values.
func Assignment(s *clusterset.ServiceView, hostname string, port *federationpb.ServicePort, view View, gateways *clusterset.Gateways) LoadAssignment {
	return assign(s, port, view, gateways).assignment(ClusterName(port.GetPort(), hostname))
}

// assign gathers the entries of an assignment by locality. An endpoint on
// another network than the view's is counted behind that network's
// gateways, as clusterset.Behind says.
func assign(s *clusterset.ServiceView, port *federationpb.ServicePort, view View, gateways *clusterset.Gateways) *builder {
	b := &builder{view: view, groups: make(map[groupKey]*group), seen: seenPool.Get().(map[netip.AddrPort]bool)}
	defer func() {
		clear(b.seen)
		seenPool.Put(b.seen)
		b.seen = nil
	}()
	remote := make(map[federation.NetworkID]*clusterset.Behind)
	for _, c := range s.Clusters {
		tier := 0
		if c.Stale {
			tier = numProximities
		}
		for _, ep := range c.Endpoints {
			serving := clusterset.ServingOf(ep.Endpoint)
			if serving == clusterset.NotServed || serving == clusterset.Draining && view.Proxyless {
				continue
			}
			target, ok := endpointPort(ep.Endpoint, port)
			if !ok {
				continue
			}
			loc := clusterset.LocalityOf(ep.GetLocality())
			if ep.Network != view.Network {
				r := remote[ep.Network]
				if r == nil {
					r = &clusterset.Behind{}
					remote[ep.Network] = r
				}
				r.Add(ep.Endpoint, c.Stale, b.rank(loc))
				continue
			}
			b.addEndpoint(ep, target, healthOf(serving), loc, tier)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(remote)) {
		b.addGateways(n, remote[n].Stand(), gateways.MTLS(n))
	}
	return b
}

// seenPool recycles builders' address sets: allocating one per assignment
// would be a third of what re-encoding a changed service's assignments
// allocates.
var seenPool = sync.Pool{New: func() any { return map[netip.AddrPort]bool{} }}

// builder accumulates the lb_endpoints of one assignment by locality.
type builder struct {
	view   View
	groups map[groupKey]*group
	// seen holds every address:port placed so far: grpc-go NACKs an
	// assignment that repeats one anywhere in it.
	seen map[netip.AddrPort]bool
	// units counts the endpoints the assignment stands for: each local
	// endpoint, and each remote one represented by a gateway.
	units uint64
	// shares counts gateway entries, each of which may round its weight up
	// by less than 1.
	shares uint64
	// lcm is the least common multiple of the gateway counts used (capped
	// at maxTotalWeight+1): scaling every weight by it splits each
	// network's weight exactly.
	lcm uint64
}

// groupKey is a group's locality and rank: a locality with live and
// stale endpoints has one group per tier (at two priorities, which Envoy
// and grpc-go accept).
type groupKey struct {
	locality Locality
	rank     int
}

// group is one locality's entries of one tier.
type group struct {
	locality Locality
	rank     int
	entries  []entry
}

// entry is one lb_endpoint before weights are known. Its weight is
// ceil(units*scale/share): a pod has 1 unit and share 1; a gateway carries
// its network's units, split across share gateways.
type entry struct {
	address      string
	port         uint32
	health       Health
	meta         metaKey
	units, share uint64
}

// weight is ceil(units*scale/share).
func (e entry) weight(scale uint64) uint64 { return (e.units*scale + e.share - 1) / e.share }

type metaKey struct {
	cluster federation.ClusterID
	network federation.NetworkID
}

// rank is the proximity of an endpoint locality to the view's. Each level
// counts only when the view has it: a proxy that does not know its zone
// treats its whole region as near, and one that does not know its region
// has no preference at all (rather than preferring unlabelled endpoints).
func (b *builder) rank(l Locality) int {
	v := b.view.Locality
	switch {
	case v.Region == "":
		return sameZone
	case l.Region != v.Region:
		return elsewhere
	case v.Zone == "":
		return sameZone
	case l.Zone != v.Zone:
		return sameRegion
	case v.Subzone != "" && l.Subzone != v.Subzone:
		return sameRegion
	default:
		return sameZone
	}
}

// groupOf returns locality l's group in a tier (0 for live clusters,
// numProximities for stale ones).
func (b *builder) groupOf(l Locality, tier int) *group {
	k := groupKey{locality: l, rank: b.rank(l) + tier}
	g := b.groups[k]
	if g == nil {
		g = &group{locality: l, rank: k.rank}
		b.groups[k] = g
	}
	return g
}

// addEndpoint adds an endpoint on the view's network.
func (b *builder) addEndpoint(ep clusterset.TaggedEndpoint, port uint32, health Health, loc Locality, tier int) {
	addr, err := netip.ParseAddr(ep.GetAddress())
	if err != nil || addr.Zone() != "" {
		return // Validation admits only plain IPs; never emit what Envoy cannot connect to.
	}
	ap := netip.AddrPortFrom(addr, uint16(port))
	if b.seen[ap] {
		// Two clusters on one network with overlapping pod ranges. Keep the
		// first (clusters are sorted by ID) rather than NACK the whole
		// assignment.
		return
	}
	b.seen[ap] = true
	g := b.groupOf(loc, tier)
	g.entries = append(g.entries, entry{
		address: ep.GetAddress(),
		port:    port,
		health:  health,
		meta:    metaKey{cluster: ep.Cluster, network: ep.Network},
		units:   1,
		share:   1,
	})
	b.units++
}

// addGateways adds the gateways that stand for network n's endpoints
// (what clusterset.Behind says they stand for, and where they go), their
// weight split evenly across them.
func (b *builder) addGateways(n federation.NetworkID, st clusterset.Stand, gateways []*federationpb.Gateway) {
	if st.Count == 0 {
		return
	}
	tier := 0
	if st.Stale {
		tier = numProximities
	}
	usable := make([]*federationpb.Gateway, 0, len(gateways))
	for _, gw := range gateways {
		// EDS entries must be IPs: Envoy resolves DNS names only for
		// STRICT_DNS/LOGICAL_DNS clusters, never inside an EDS assignment,
		// and grpc-go does not resolve them either. A DNS-named gateway
		// would need a cluster type of its own, which the hub does not
		// generate: it is skipped.
		addr, err := netip.ParseAddr(gw.GetAddress())
		if err != nil || addr.Zone() != "" || gw.GetPort() == 0 || gw.GetPort() > 65535 {
			continue
		}
		ap := netip.AddrPortFrom(addr, uint16(gw.GetPort()))
		if b.seen[ap] {
			continue
		}
		b.seen[ap] = true
		usable = append(usable, gw)
	}
	if len(usable) == 0 {
		return // No way into n: its endpoints are unreachable from this view.
	}
	g := b.groupOf(st.Locality, tier)
	share := uint64(len(usable))
	for _, gw := range usable {
		g.entries = append(g.entries, entry{
			address: gw.GetAddress(),
			port:    gw.GetPort(),
			health:  healthOf(st.Serving),
			// The gateway's cluster is not known here (one gateway may be
			// reported by several clusters of n).
			meta:  metaKey{network: n},
			units: st.Count,
			share: share,
		})
	}
	b.units += st.Count
	b.shares += share
	b.lcm = lcmCapped(max(b.lcm, 1), share)
}

// assignment turns the groups into localities: ordered by priority and
// locality, endpoints by address and port, weights scaled.
func (b *builder) assignment(clusterName string) LoadAssignment {
	a := LoadAssignment{ClusterName: clusterName}
	if len(b.groups) == 0 {
		return a
	}
	scale := b.scale()
	groups, priority := b.ordered()
	a.Localities = make([]LocalityEndpoints, 0, len(groups))
	for _, g := range groups {
		l := LocalityEndpoints{Locality: g.locality, Priority: priority[g.rank], Endpoints: make([]LbEndpoint, 0, len(g.entries))}
		var sum uint64
		for _, e := range g.entries {
			w := e.weight(scale)
			sum += w
			l.Endpoints = append(l.Endpoints, LbEndpoint{
				Address: e.address,
				Port:    e.port,
				Health:  e.health,
				Weight:  uint32(w),
				Cluster: e.meta.cluster,
				Network: e.meta.network,
			})
		}
		l.Weight = uint32(sum)
		a.Localities = append(a.Localities, l)
	}
	return a
}

// ordered returns the groups by priority and locality, each group's
// entries sorted by address and port, and the priority of each rank: the
// ranks in use renumbered to be contiguous from 0.
func (b *builder) ordered() ([]*group, [numRanks]uint32) {
	var used [numRanks]bool
	for _, g := range b.groups {
		used[g.rank] = true
	}
	groups := slices.SortedFunc(maps.Values(b.groups), func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), clusterset.CompareLocality(a.locality, b.locality))
	})
	for _, g := range groups {
		slices.SortFunc(g.entries, func(a, b entry) int {
			return cmp.Or(strings.Compare(a.address, b.address), cmp.Compare(a.port, b.port))
		})
	}
	return groups, renumber(used)
}

// renumber returns the priority of each rank: the ranks in use, renumbered
// to be contiguous from 0. Assignments and their keys both read ranks
// through it.
func renumber(used [numRanks]bool) [numRanks]uint32 {
	var priority [numRanks]uint32
	next := uint32(0)
	for r, u := range used {
		priority[r] = next
		if u {
			next++
		}
	}
	return priority
}

// scale is the factor every weight is multiplied by: the LCM of the gateway
// counts, so that each network's weight splits exactly, unless that would
// push the total past maxTotalWeight; then the largest factor that fits
// (gateway weights are rounded up, hence the room left for shares).
func (b *builder) scale() uint64 {
	if b.lcm <= 1 || b.units == 0 {
		return 1
	}
	limit := uint64(1)
	if maxTotalWeight > b.shares {
		limit = max((maxTotalWeight-b.shares)/b.units, 1)
	}
	return min(b.lcm, limit)
}

// lcmCapped returns lcm(a, b), or maxTotalWeight+1 if it is larger: no
// scale above maxTotalWeight can be used anyway, and capping keeps the
// product from overflowing.
func lcmCapped(a, b uint64) uint64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return min(a/x*b, maxTotalWeight+1)
}

// healthOf is how an endpoint served as s is sent (clusterset.ServingOf):
// ready ones HEALTHY, draining ones DRAINING, so that Envoy lets their
// requests finish (grpc-go ignores them).
func healthOf(s clusterset.Serving) Health {
	if s == clusterset.Draining {
		return HealthDraining
	}
	return HealthHealthy
}

// endpointPort is the endpoint's own (target) port for service port sp: the
// port of the same name, or, for an unnamed service port, the endpoint's
// only port. Ports are matched by name because a merged service's port
// numbers may map to different target ports in each cluster.
func endpointPort(ep *clusterset.Endpoint, sp *federationpb.ServicePort) (uint32, bool) {
	ports := ep.GetPorts()
	var match *federationpb.EndpointPort
	for _, p := range ports {
		if p.GetName() == sp.GetName() {
			match = p
			break
		}
	}
	if match == nil && sp.GetName() == "" && len(ports) == 1 {
		match = ports[0]
	}
	if match == nil || normalProtocol(match.GetProtocol()) != normalProtocol(sp.GetProtocol()) ||
		match.GetPort() == 0 || match.GetPort() > 65535 {
		return 0, false
	}
	return match.GetPort(), true
}

// Localities returns the distinct localities of s's endpoints, sorted:
// what AppendAssignmentKey ranks.
func Localities(s *clusterset.ServiceView) []Locality {
	var out []Locality
	for _, c := range s.Clusters {
		for _, ep := range c.Endpoints {
			l := clusterset.LocalityOf(ep.GetLocality())
			if i, found := slices.BinarySearchFunc(out, l, clusterset.CompareLocality); !found {
				out = slices.Insert(out, i, l)
			}
		}
	}
	return out
}

// HasDraining reports whether any of s's endpoints is draining
// (clusterset.Draining): only then does a proxyless view's assignment
// differ from an Envoy's.
func HasDraining(s *clusterset.ServiceView) bool {
	for _, c := range s.Clusters {
		for _, ep := range c.Endpoints {
			if clusterset.ServingOf(ep.Endpoint) == clusterset.Draining {
				return true
			}
		}
	}
	return false
}

// AppendAssignmentKey appends to dst the key of what of view the load
// assignments of a service whose endpoints are in locs (see Localities)
// depend on: an assignment reads the view only through its network, its
// being proxyless when the service has draining endpoints (draining, see
// HasDraining), and the order of the ranks of the endpoint localities (its priorities are the
// ranks in use, renumbered), so two views with one key get identical
// assignments. Proxies in many zones see a service in a few ways (same
// zone, same region, elsewhere as one of its clusters'), so the hub builds
// and encodes one assignment per key rather than one per view: a view that
// ranks the localities 1 and 2 (in the service's region) shares the key of
// one that ranks them 0 and 2 (in one of its zones). A push looks a changed
// service up for every view; a map lookup by string(key) of a reused
// buffer allocates nothing.
func AppendAssignmentKey(dst []byte, locs []Locality, draining bool, view View) []byte {
	b := builder{view: view}
	dst = append(dst, view.Network...)
	if view.Proxyless && draining {
		dst = append(dst, 0, 'g')
	}
	dst = append(dst, 0)
	start := len(dst)
	var used [numRanks]bool
	for _, l := range locs {
		r := b.rank(l)
		used[r] = true
		dst = append(dst, byte(r))
	}
	priority := renumber(used)
	for i := start; i < len(dst); i++ {
		dst[i] = byte('0' + priority[dst[i]])
	}
	return dst
}
