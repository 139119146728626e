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

// CountsBehindGateway reports whether a workload counts in its network's
// capacity behind the gateway that stands for it (a ztunnel's split-horizon
// workload): a ready one does.
func CountsBehindGateway(w *Workload) bool { return w.GetReady() }

// Behind tallies the endpoints of one network that its gateways stand for,
// as a viewer on another network sees them. The zero value is empty.
//
// The gateways carry one unit of weight for each ready endpoint of the
// network; when it has only draining ones, they carry those, and drain
// themselves. They stand for its live clusters' endpoints; only when it
// has none do they stand for its stale clusters', after every live
// endpoint. They go, all of them, into ONE locality: that of the endpoint
// they stand for nearest to the viewer, the smallest of equals. (Istio
// puts a gateway into every locality whose endpoints it replaces; grpc-go
// refuses an address that appears twice in an assignment.)
type Behind struct {
	live, stale servingTally
}

type servingTally struct{ ready, draining tally }

// tally counts endpoints and remembers the locality the gateways go into.
type tally struct {
	count uint64
	best  Locality
	rank  int
}

func (t *tally) add(l Locality, rank int) {
	if t.count == 0 || rank < t.rank || rank == t.rank && CompareLocality(l, t.best) < 0 {
		t.best, t.rank = l, rank
	}
	t.count++
}

// Add counts an endpoint of the network, if its gateways stand for it:
// one of a stale cluster when stale is set. rank is the proximity of its
// locality to the viewer, smaller being nearer (the same for every
// endpoint when the viewer has no preference).
func (b *Behind) Add(e *Endpoint, stale bool, rank int) {
	s := ServingOf(e)
	if s == NotServed {
		return
	}
	b.AddServing(s, LocalityOf(e.GetLocality()), stale, rank)
}

// AddServing counts an endpoint the gateways stand for, served as s (not
// NotServed), whose locality is l: for a caller that has both already.
func (b *Behind) AddServing(s Serving, l Locality, stale bool, rank int) {
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
	return Stand{Count: t.count, Serving: serving, Stale: stale, Locality: t.best}
}
