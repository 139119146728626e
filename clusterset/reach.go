package clusterset

import (
	"strings"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// An endpoint on another network than its viewer's cannot be reached at
// its address: the viewer reaches it through an east-west gateway of its
// network ("split horizon"), which stands for it. This file is the one
// place that says which endpoints a gateway stands for, how much they
// weigh and in which locality the gateway goes. Sidecars' and gRPC
// clients' EDS, the workload API's split-horizon workloads and the
// spokes' imports all read it; which gateways lead into a network is
// Gateways'.

// Locality is an endpoint's or a proxy's region, zone and subzone.
type Locality struct{ Region, Zone, Subzone string }

// LocalityOf returns the locality of a message (zero for nil).
func LocalityOf(l *federationpb.Locality) Locality {
	return Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubzone()}
}

// CompareLocality orders localities by region, zone, then subzone.
func CompareLocality(a, b Locality) int {
	if c := strings.Compare(a.Region, b.Region); c != 0 {
		return c
	}
	if c := strings.Compare(a.Zone, b.Zone); c != 0 {
		return c
	}
	return strings.Compare(a.Subzone, b.Subzone)
}

// Serving is how an endpoint is served.
type Serving uint8

const (
	// NotServed endpoints are sent to no client and counted by no gateway.
	NotServed Serving = iota
	// Ready endpoints take new connections.
	Ready
	// Draining endpoints are terminating but still serve: the requests
	// they have may finish, new ones go elsewhere while anything else is
	// left.
	Draining
)

// ServingOf says whether and how an endpoint is served: a ready one as
// Ready; a terminating one that still serves as Draining; everything else
// not at all. Terminating wins over a contradictory ready flag.
func ServingOf(e *Endpoint) Serving {
	switch {
	case e.GetTerminating():
		if e.GetServing() || e.GetReady() {
			return Draining
		}
		return NotServed
	case e.GetReady():
		return Ready
	default:
		return NotServed
	}
}

// ThroughGateway reports whether an east-west gateway can forward to the
// endpoint: it forwards only Istio mutual TLS (SNI routing on 15443, HBONE
// on 15008), so an endpoint that takes plaintext is reached on its own
// network only, as istiod's EDS has it.
func ThroughGateway(e *Endpoint) bool { return !e.GetPlaintext() }

// CountsBehindGateway reports whether a workload counts in its network's
// capacity behind the gateway that stands for it (a ztunnel's split-horizon
// workload): a ready one the gateway can forward to, in ambient mode or
// injected (see ThroughGateway).
func CountsBehindGateway(w *Workload) bool {
	return w.GetReady() && (w.GetAmbient() || w.GetMeshTls())
}

// Behind tallies the endpoints of one network that its gateways stand for,
// as a viewer on another network sees them. The zero value is empty.
//
// The gateways carry one unit of weight for each ready endpoint of the
// network; when it has only draining ones, they carry those, and drain
// themselves. They stand for its live clusters' endpoints; only when it
// has none do they stand for its stale clusters', after every live
// endpoint. They go, all of them, into ONE locality: of those nearest to
// the viewer, the one holding most of the endpoints they stand for. (Istio
// puts a gateway into every locality whose endpoints it replaces; grpc-go
// refuses an address that appears twice in an assignment.)
type Behind struct {
	live, stale servingTally
}

type servingTally struct{ ready, draining tally }

// tally counts endpoints and, for the localities nearest to the viewer,
// how many each holds: the gateways go into the one with most.
type tally struct {
	count uint64
	rank  int
	near  []localityCount // the localities of rank, in the order first seen
}

type localityCount struct {
	l Locality
	n uint64
}

func (t *tally) add(l Locality, rank int) {
	if t.count == 0 || rank < t.rank {
		t.rank, t.near = rank, t.near[:0]
	}
	t.count++
	if rank != t.rank {
		return
	}
	for i := range t.near {
		if t.near[i].l == l {
			t.near[i].n++
			return
		}
	}
	t.near = append(t.near, localityCount{l, 1})
}

// best is the nearest locality that holds most of the endpoints: a
// labelled one before the unlabelled one among equals (a gateway there
// would merge with direct endpoints that have no locality), then the
// smallest, so that every replica and every push decides alike.
func (t *tally) best() Locality {
	var best localityCount
	for i, c := range t.near {
		if i == 0 || c.n > best.n || c.n == best.n && betterNamed(c.l, best.l) {
			best = c
		}
	}
	return best.l
}

func betterNamed(a, b Locality) bool {
	if (a == Locality{}) != (b == Locality{}) {
		return b == Locality{}
	}
	return CompareLocality(a, b) < 0
}

// Add counts an endpoint of the network, if its gateways stand for it:
// one of a stale cluster when stale is set. rank is the proximity of its
// locality to the viewer, smaller being nearer (the same for every
// endpoint when the viewer has no preference).
func (b *Behind) Add(e *Endpoint, stale bool, rank int) {
	s := ServingOf(e)
	if s == NotServed || !ThroughGateway(e) {
		return
	}
	l := LocalityOf(e.GetLocality())
	t := &b.live
	if stale {
		t = &b.stale
	}
	if s == Ready {
		t.ready.add(l, rank)
	} else {
		t.draining.add(l, rank)
	}
}

// Stand is what one network's gateways stand for.
type Stand struct {
	// Count is the endpoints the gateways carry: the network's weight,
	// split evenly across its gateways. Zero: they stand for nothing.
	Count uint64
	// Serving is Ready, or Draining when only draining endpoints are left.
	Serving Serving
	// Stale: the endpoints are stale clusters'; the gateways go after
	// every live endpoint.
	Stale bool
	// Locality is where the gateways go.
	Locality Locality
}

// Stand returns what the network's gateways stand for.
func (b *Behind) Stand() Stand {
	h, stale := &b.live, false
	if h.ready.count == 0 && h.draining.count == 0 {
		h, stale = &b.stale, true
	}
	t, serving := &h.ready, Ready
	if t.count == 0 {
		t, serving = &h.draining, Draining
	}
	if t.count == 0 {
		return Stand{}
	}
	return Stand{Count: t.count, Serving: serving, Stale: stale, Locality: t.best()}
}
