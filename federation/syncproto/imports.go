package syncproto

import (
	"fmt"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// The imports travel the other way: the hub tells an importing spoke
// (Hello.imports) what its cluster should hold (Imports), and the spoke
// reports what its cluster holds (ImportsHeld). Both are sets sent whole
// first on each stream, then as changes, in chunks below the stream's
// message bound; neither is acknowledged (the stream is ordered and a
// broken stream starts both over in full).

// ImportsWanted is what a spoke's Hello asks its imports to carry.
type ImportsWanted struct {
	// Mesh: every federated service, not only the MCS imports, with the
	// workloads behind the endpoints.
	Mesh bool
	// RemoteViews: besides, each source cluster's service as that cluster
	// has it, and the members' clusters.
	RemoteViews bool
}

// ImportsFeed gives one hub stream the imports its cluster should hold
// (hub/imports.Feed is one). One session uses it.
type ImportsFeed interface {
	// Ready has a value, or is closed, when Next may have a set to send.
	Ready() <-chan struct{}
	// Next returns the next set in chunks below maxBytes, or nil when
	// there is nothing to send yet.
	Next(maxBytes int) []*federationpb.Imports
}

// ImportsLink is one spoke stream's side of the imports (spoke/imports
// has one per hub replica). One session uses it at a time.
type ImportsLink interface {
	// Start begins a stream: the imports it held from a previous stream
	// are out of date until the hub's first set, and the next report is
	// the full one.
	Start()
	// Received takes a complete set from the hub (its chunks joined).
	Received(im *federationpb.Imports)
	// NextHeld returns the next report in chunks below maxBytes, or nil
	// when there is nothing new to report.
	NextHeld(maxBytes int) []*federationpb.ImportsHeld
	// HeldChanged has a value when NextHeld may have a report.
	HeldChanged() <-chan struct{}
	// Stop ends the stream.
	Stop()
}

// maxImportChunks bounds the chunks of one set either end holds before
// its last chunk.
const maxImportChunks = 4096

// importsAssembler joins the chunks of one Imports set.
type importsAssembler struct {
	pending *federationpb.Imports
	chunks  int
}

// add takes one chunk and returns the set after its last chunk.
func (a *importsAssembler) add(im *federationpb.Imports) (*federationpb.Imports, error) {
	if a.pending != nil && (a.pending.GetVersion() != im.GetVersion() || a.pending.GetFull() != im.GetFull()) {
		v := a.pending.GetVersion()
		a.pending, a.chunks = nil, 0
		return nil, fmt.Errorf("imports set %d ended without its last chunk (set %d began)", v, im.GetVersion())
	}
	if a.pending == nil {
		if !im.GetMore() {
			return im, nil
		}
		a.pending = &federationpb.Imports{Version: im.GetVersion(), Full: im.GetFull(), Network: im.GetNetwork()}
	}
	a.chunks++
	if a.chunks > maxImportChunks {
		a.pending, a.chunks = nil, 0
		return nil, fmt.Errorf("imports set %d has more than %d chunks", im.GetVersion(), maxImportChunks)
	}
	a.pending.Imports = append(a.pending.Imports, im.GetImports()...)
	a.pending.Removed = append(a.pending.Removed, im.GetRemoved()...)
	a.pending.Clusters = append(a.pending.Clusters, im.GetClusters()...)
	if im.GetMore() {
		return nil, nil
	}
	out := a.pending
	a.pending, a.chunks = nil, 0
	return out, nil
}

// heldAssembler joins the chunks of one ImportsHeld report, within bounds:
// the hub takes reports from spokes.
type heldAssembler struct {
	pending *federationpb.ImportsHeld
	entries int
}

// maxHeldEntries bounds the entries of one report.
const maxHeldEntries = 100_000

func (a *heldAssembler) add(h *federationpb.ImportsHeld) (*federationpb.ImportsHeld, error) {
	if a.pending != nil && a.pending.GetFull() != h.GetFull() {
		a.pending, a.entries = nil, 0
		return nil, fmt.Errorf("%w: a report of imports held ended without its last chunk", federation.ErrInvalid)
	}
	a.entries += len(h.GetImports()) + len(h.GetRemoved())
	if a.entries > maxHeldEntries {
		a.pending, a.entries = nil, 0
		return nil, fmt.Errorf("a report of imports held has more than %d entries: %w", maxHeldEntries, federation.ErrOverLimit)
	}
	if a.pending == nil {
		if !h.GetMore() {
			a.entries = 0
			return h, nil
		}
		a.pending = &federationpb.ImportsHeld{Full: h.GetFull()}
	}
	a.pending.Imports = append(a.pending.Imports, h.GetImports()...)
	a.pending.Removed = append(a.pending.Removed, h.GetRemoved()...)
	a.pending.Applied = h.GetApplied()
	if h.GetMore() {
		return nil, nil
	}
	out := a.pending
	a.pending, a.entries = nil, 0
	return out, nil
}
