package syncproto

import (
	"fmt"
	"slices"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// assembler joins the chunks of one version into one update and bounds
// what it holds by the hub's limits.
type assembler struct {
	limits  Limits
	pending *federationpb.ShardUpdate
	objects int
	// dropping is the version whose remaining chunks are discarded after an
	// early Nack.
	dropping uint64
	// seen identifies the chunks of the pending update, to catch one that
	// comes twice.
	seen []chunkID
}

// chunkID identifies a chunk among those of its update by its first
// object of one list: no object is in two chunks of an update.
type chunkID struct {
	list    int
	a, b, c string
}

func chunkIDOf(u *federationpb.ShardUpdate) (chunkID, bool) {
	switch {
	case len(u.GetServices()) > 0:
		s := u.GetServices()[0]
		return chunkID{1, s.GetNamespace(), s.GetName(), ""}, true
	case len(u.GetEndpoints()) > 0:
		e := u.GetEndpoints()[0]
		return chunkID{2, e.GetNamespace(), e.GetService(), e.GetAddress()}, true
	case len(u.GetWorkloads()) > 0:
		return chunkID{3, u.GetWorkloads()[0].GetUid(), "", ""}, true
	case len(u.GetRemovedServices()) > 0:
		return chunkID{4, u.GetRemovedServices()[0], "", ""}, true
	case len(u.GetRemovedEndpoints()) > 0:
		return chunkID{5, u.GetRemovedEndpoints()[0], "", ""}, true
	case len(u.GetRemovedWorkloads()) > 0:
		return chunkID{6, u.GetRemovedWorkloads()[0], "", ""}, true
	}
	return chunkID{}, false
}

// add takes one chunk. It returns the complete update after its last chunk,
// or a Nack when the chunks are out of order, repeated or too many.
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
	if a.pending != nil || u.GetMore() {
		// One-chunk updates, most of them, need no identity.
		if id, ok := chunkIDOf(u); ok {
			if slices.Contains(a.seen, id) {
				a.reset()
				return nil, &federationpb.Nack{
					Version: u.GetVersion(), Nonce: u.GetNonce(),
					Reason: fmt.Sprintf("a chunk of version %d arrived twice", u.GetVersion()),
				}
			}
			a.seen = append(a.seen, id)
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

func (a *assembler) reset() {
	clear(a.seen) // let go of the objects' strings
	a.pending, a.objects, a.seen = nil, 0, a.seen[:0]
}

// bound is how many objects one update may carry: enough to replace every
// object the caps allow (upserts plus removals).
func (a *assembler) bound() int {
	if a.limits.MaxServices == 0 || a.limits.MaxEndpoints == 0 || a.limits.MaxWorkloads == 0 {
		return 0
	}
	return 2 * (a.limits.MaxServices + a.limits.MaxEndpoints + a.limits.MaxWorkloads)
}
