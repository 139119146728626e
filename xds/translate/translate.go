package translate

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/xds/resources"
)

// Type URLs of Istio ambient's workload API.
const (
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// View is one set of one type that proxies share: EDS per network and
// locality (split horizon and locality priorities make it differ),
// workload addresses per network, and one set for everything else.
type View struct {
	TypeURL string
	// Key names the set among those of its type; "" for a shared set.
	Key string
	// For is what of the proxies the set is built for: EDS reads the
	// network and locality, addresses the network alone.
	For resources.View
}

// ViewFor returns the view of a type that proxies with v see.
func ViewFor(typeURL string, v resources.View) View {
	switch typeURL {
	case resources.EndpointType:
		return View{TypeURL: typeURL, Key: v.Key(), For: v}
	case AddressType:
		return View{TypeURL: typeURL, Key: string(v.Network), For: resources.View{Network: v.Network}}
	}
	return View{TypeURL: typeURL}
}

// PerView reports whether a type's sets differ between views.
func PerView(typeURL string) bool {
	return typeURL == resources.EndpointType || typeURL == AddressType
}

// SetUpdate is a change to one set: resources to add or replace, names to
// remove, or the whole set to forget once no proxy uses it. An update of
// a set that does not exist yet creates it, even an empty one, so that
// the proxies waiting for it are answered.
type SetUpdate struct {
	TypeURL  string
	View     string
	Upserts  []*Resource
	Removals []string
	Drop     bool
}

// Translator turns a sequence of registry snapshots into the changes of
// the sets proxies are served from. It remembers what it produced from
// the previous snapshot, so that each call regenerates only what changed
// and removes what is gone. It is deterministic and does no I/O: it is
// owned by one goroutine (the xDS server's push loop) and holds no locks.
type Translator struct {
	envoy   envoyTranslator   // CDS, LDS, RDS, EDS
	ambient ambientTranslator // the workload API
	built   []View            // the views whose sets are built, sorted
	inUse   []View            // the views of the previous call, as given
	started bool
	encodes int64
}

// New returns a translator that has produced nothing yet. trustDomain is
// the workloads' trust domain when their cluster names none.
func New(trustDomain string) *Translator {
	return &Translator{
		envoy:   newEnvoyTranslator(),
		ambient: newAmbientTranslator(trustDomain),
	}
}

// Encodes counts the resources encoded so far.
func (t *Translator) Encodes() int64 { return t.encodes }

// Translate returns the set updates that take proxies from the previous
// snapshot to snap, given what changed between them, for the views in
// use. The first call builds everything. A view in use that was not
// before gets its whole set; a view no longer in use is dropped. Calling
// it again with the same snapshot and no changes only brings the views
// up to date.
//
// Each update goes to emit as soon as it is built, so that the caller can
// apply it, and proxies get it, while the rest is computed (the workload
// API's changes take as long as the EDS of every view). Updates come in
// the order proxies should apply them: clusters before endpoints,
// listeners before routes. The upserts of a new view's address set come in
// no particular order. A resource that cannot be encoded is left out
// and reported in the error, which does not stop the rest.
func (t *Translator) Translate(snap clusterset.Snapshot, changes clusterset.Changes, views []View, emit func(SetUpdate)) error {
	all := !t.started
	t.started = true
	in := &input{t: t, snap: snap, all: all, services: map[string]struct{}{}, emit: emit}
	for _, k := range changes.Services {
		in.services[k] = struct{}{}
	}
	in.workloads = changes.Workloads

	// The views in use change rarely (a proxy of a new network or
	// locality connects, the last of one leaves): they are compared with
	// the previous call's before anything is sorted or indexed.
	var added []View
	if !slices.Equal(views, t.inUse) {
		t.inUse = slices.Clone(views)
		wanted := make(map[View]bool, len(views))
		for _, v := range views {
			if PerView(v.TypeURL) {
				wanted[v] = true
			}
		}
		kept := t.built[:0]
		for _, v := range t.built {
			if wanted[v] {
				kept = append(kept, v)
				delete(wanted, v)
			} else {
				emit(SetUpdate{TypeURL: v.TypeURL, View: v.Key, Drop: true})
				// The assignments only the dropped view used would stay
				// until their service changes.
				clear(t.envoy.eds)
			}
		}
		t.built = kept
		added = sortedViews(wanted)
	}
	t.envoy.translate(in, t.built)
	// The workload API is built from the first ztunnel on: a mesh without
	// one does not pay its encodings and indexes (40% of the hub's heap).
	ambientAll := all
	if !t.ambient.active && slices.ContainsFunc(views, func(v View) bool { return v.TypeURL == AddressType }) {
		t.ambient.active, ambientAll = true, true
	}
	if t.ambient.active {
		t.ambient.translate(in, t.built, ambientAll)
	}
	if all {
		// Authorization policies are not federated, but ztunnel is not
		// ready before it has a response for them.
		emit(SetUpdate{TypeURL: AuthorizationType})
	}
	for _, v := range added {
		switch v.TypeURL {
		case resources.EndpointType:
			emit(t.envoy.build(in, v))
		case AddressType:
			emit(t.ambient.build(v))
		}
	}
	if len(added) > 0 {
		t.built = append(t.built, added...)
		slices.SortFunc(t.built, compareViews)
	}
	return errors.Join(in.errs...)
}

// input is one call's snapshot and what changed.
type input struct {
	t         *Translator
	snap      clusterset.Snapshot
	all       bool
	services  map[string]struct{} // keys of changed services
	workloads []string            // keys of changed workloads
	emit      func(SetUpdate)
	errs      []error
}

// resource wraps an encoding, counting it.
func (in *input) resource(typeURL, name string, b []byte) *Resource {
	in.t.encodes++
	return NewResource(typeURL, name, b)
}

// encode encodes m, counting it; a failure is recorded.
func (in *input) encode(typeURL, name string, m proto.Message) (*Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		err = fmt.Errorf("encode %s %s: %w", typeURL, name, err)
		in.errs = append(in.errs, err)
		return nil, err
	}
	return in.resource(typeURL, name, b), nil
}

func sortedViews(m map[View]bool) []View { return slices.SortedFunc(maps.Keys(m), compareViews) }

func compareViews(a, b View) int {
	return cmp.Or(cmp.Compare(a.TypeURL, b.TypeURL), cmp.Compare(a.Key, b.Key))
}

// without returns the names in a that are not in b.
func without(a, b []string) []string {
	var out []string
	for _, n := range a {
		if !slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	return out
}
