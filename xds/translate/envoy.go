package translate

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/xds/resources"
)

// envoyTranslator produces CDS, LDS and RDS, shared by every proxy, and
// EDS per view.
type envoyTranslator struct {
	generated map[string]*generatedNames // service key → what it produced
	keys      []string                   // generated's keys, sorted; nil when they changed
	gateways  *clusterset.Gateways
	networks  map[federation.ClusterID]federation.NetworkID
	// eds keeps the load assignments from one call to the next until
	// their service changes, so that a view that comes later (most of
	// them, as proxies connect) gets the encodings others have.
	eds map[string]*assignments // by service key
	key []byte                  // an assignment key, reused
}

type generatedNames struct {
	clusters  []string // also the route and EDS names
	listeners []string
	// shape is what CDS, LDS and RDS depend on (hostnames and ports), so
	// that an endpoint-only change skips them.
	shape string
}

func newEnvoyTranslator() envoyTranslator {
	return envoyTranslator{generated: map[string]*generatedNames{}, eds: map[string]*assignments{}}
}

// shapeOf fingerprints what a service's CDS, LDS and RDS are made of:
// its hostnames and ports, and its import's ClusterSetIPs (vips).
func shapeOf(v *clusterset.ServiceView, vips []netip.Addr) string {
	var b strings.Builder
	for _, h := range resources.Hostnames(v) {
		b.WriteString(h + ";")
	}
	for _, p := range resources.Ports(v) {
		fmt.Fprintf(&b, "%s/%d/%d;", p.GetName(), p.GetPort(), p.GetProtocol())
	}
	for _, ip := range vips {
		b.WriteString(ip.String() + ";")
	}
	return b.String()
}

// translate regenerates the changed services' resources, and the EDS of
// every service when the clusters' networks or gateways changed (they
// decide split horizon).
func (e *envoyTranslator) translate(in *input, views []View) {
	gateways := in.snap.Gateways()
	networks := map[federation.ClusterID]federation.NetworkID{}
	for _, c := range in.snap.Clusters() {
		networks[c.ID] = c.Network
	}
	allEDS := in.all || !gateways.Equal(e.gateways) || !maps.Equal(networks, e.networks)
	e.gateways, e.networks = gateways, networks
	if allEDS {
		clear(e.eds)
	}
	for key := range in.services {
		delete(e.eds, key)
	}

	changed := in.services
	if in.all {
		changed = map[string]struct{}{}
		for k := range e.generated {
			changed[k] = struct{}{}
		}
		for _, v := range in.snap.Services() {
			changed[v.Key] = struct{}{}
		}
	}
	shared := map[string]map[string][]byte{
		resources.ClusterType: {}, resources.ListenerType: {}, resources.RouteType: {},
	}
	removed := map[string][]string{}
	keys := slices.Sorted(maps.Keys(changed))
	for _, key := range keys {
		v, ok := in.snap.Service(key)
		old := e.generated[key]
		var shape string
		var vips []netip.Addr
		if ok {
			vips = in.snap.Import(key).ClustersetIPs
			shape = shapeOf(v, vips)
		}
		if ok && old != nil && old.shape == shape {
			continue // only endpoints changed: CDS, LDS and RDS stand
		}
		now := &generatedNames{shape: shape}
		if ok {
			for _, c := range resources.EncodeClusters(v) {
				shared[resources.ClusterType][c.Name] = c.Value
				now.clusters = append(now.clusters, c.Name)
			}
			for _, l := range resources.EncodeListeners(v, vips) {
				shared[resources.ListenerType][l.Name] = l.Value
				now.listeners = append(now.listeners, l.Name)
			}
			for _, r := range resources.EncodeRoutes(v, vips) {
				shared[resources.RouteType][r.Name] = r.Value
			}
			if old == nil {
				e.keys = nil
			}
			e.generated[key] = now
		} else if old != nil {
			delete(e.generated, key)
			e.keys = nil
		}
		if old != nil {
			gone := without(old.clusters, now.clusters)
			removed[resources.ClusterType] = append(removed[resources.ClusterType], gone...)
			removed[resources.RouteType] = append(removed[resources.RouteType], gone...)
			removed[resources.EndpointType] = append(removed[resources.EndpointType], gone...)
			removed[resources.ListenerType] = append(removed[resources.ListenerType], without(old.listeners, now.listeners)...)
		}
	}
	// Clusters before endpoints, listeners before routes: the order Envoy
	// wants to avoid dropping traffic.
	for _, typ := range []string{resources.ClusterType, resources.ListenerType, resources.RouteType} {
		if u := (SetUpdate{TypeURL: typ, Upserts: in.wrapAll(typ, shared[typ]), Removals: removed[typ]}); in.all || !u.empty() {
			in.emit(u)
		}
	}
	edsKeys := keys
	if allEDS {
		edsKeys = e.serviceKeys()
	}
	for _, v := range views {
		if v.TypeURL != resources.EndpointType {
			continue
		}
		if u := (SetUpdate{TypeURL: v.TypeURL, View: v.Key, Upserts: e.assignments(in, edsKeys, v.For), Removals: removed[resources.EndpointType]}); !u.empty() {
			in.emit(u)
		}
	}
}

// build returns the whole EDS set of a new view.
func (e *envoyTranslator) build(in *input, v View) SetUpdate {
	return SetUpdate{TypeURL: v.TypeURL, View: v.Key, Upserts: e.assignments(in, e.serviceKeys(), v.For)}
}

// serviceKeys returns the keys of the services with resources, sorted:
// sorted once per change of the services, not once per view (a restart at
// a thousand zones builds a thousand views of the same services).
func (e *envoyTranslator) serviceKeys() []string {
	if e.keys == nil {
		e.keys = slices.Sorted(maps.Keys(e.generated))
	}
	return e.keys
}

func (u SetUpdate) empty() bool { return len(u.Upserts) == 0 && len(u.Removals) == 0 && !u.Drop }

// wrapAll wraps encodings by name, sorted by name.
func (in *input) wrapAll(typeURL string, encoded map[string][]byte) []*Resource {
	out := make([]*Resource, 0, len(encoded))
	for _, name := range slices.Sorted(maps.Keys(encoded)) {
		out = append(out, in.resource(typeURL, name, encoded[name]))
	}
	return out
}

// assignments are a service's load assignments, each encoded once
// however many views get it: views whose assignment key for the service is
// the same share its encodings (a clusterset's proxies in a hundred zones
// see a service in a handful of ways).
type assignments struct {
	locs []resources.Locality
	// draining: the service has draining endpoints, which gRPC clients
	// are not sent: only then do their assignments differ from Envoy's.
	draining bool
	byKey    map[string][]*Resource // by assignment key (resources.AppendAssignmentKey)
}

// assignments returns the load assignments of the services keys for view,
// in the order of keys, encoding those no view had yet.
func (e *envoyTranslator) assignments(in *input, keys []string, view resources.View) []*Resource {
	var out []*Resource
	for _, key := range keys {
		var v *clusterset.ServiceView
		a := e.eds[key]
		if a == nil {
			var ok bool
			if v, ok = in.snap.Service(key); !ok {
				continue
			}
			a = &assignments{locs: resources.Localities(v), draining: resources.HasDraining(v), byKey: map[string][]*Resource{}}
			e.eds[key] = a
		}
		e.key = resources.AppendAssignmentKey(e.key[:0], a.locs, a.draining, view)
		enc, ok := a.byKey[string(e.key)]
		if !ok {
			if v == nil {
				// Kept assignments are of a service the snapshot holds:
				// its change, or its removal, drops them.
				v, _ = in.snap.Service(key)
			}
			enc = e.encodeAssignments(in, v, view)
			a.byKey[string(e.key)] = enc
		}
		out = append(out, enc...)
	}
	return out
}

func (e *envoyTranslator) encodeAssignments(in *input, v *clusterset.ServiceView, view resources.View) []*Resource {
	var out []*Resource
	for _, host := range resources.Hostnames(v) {
		for _, p := range resources.Ports(v) {
			b := resources.EncodeLoadAssignment(v, host, p, view, e.gateways)
			out = append(out, in.resource(resources.EndpointType, resources.ClusterName(p.GetPort(), host), b))
		}
	}
	return out
}
