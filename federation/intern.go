package federation

import (
	"slices"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Interner makes the equal parts of one cluster's endpoints and workloads
// share memory: decoding (or normalizing) gives every message its own
// Locality, port list and strings, though a cluster has a few zones,
// namespaces, services and nodes, and the endpoints of a service the same
// ports. At 100,000 endpoints with their workloads those copies would be a
// third of the hub's heap. Shared parts are safe only where stored
// messages are never modified, as in the hub's registry and the spoke's
// tracker. An Interner grows with the distinct values it has seen: start a
// new one when its owner starts over (the registry does at each full
// update). Not safe for concurrent use.
type Interner struct {
	strings    map[string]string
	localities map[localityKey]*federationpb.Locality
	ports      map[string][]*federationpb.EndpointPort
	groups     map[groupKey]*endpointGroup

	workloadGroups map[workloadGroup]*workloadGroup
	// lastPorts and lastShared are the latest ports interned, and their
	// shared copy: a full state's endpoints come service by service, so
	// most are the previous one's, compared without building a key.
	lastPorts, lastShared []*federationpb.EndpointPort
}

// NewInterner returns an empty interner.
func NewInterner() *Interner {
	return &Interner{
		strings:    map[string]string{},
		localities: map[localityKey]*federationpb.Locality{},
		ports:      map[string][]*federationpb.EndpointPort{},
		groups:     map[groupKey]*endpointGroup{},

		workloadGroups: map[workloadGroup]*workloadGroup{},
	}
}

// str returns the interned copy of s.
func (in *Interner) str(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in.strings[s]; ok {
		return v
	}
	in.strings[s] = s
	return s
}

type localityKey struct{ region, zone, subzone string }

// Locality returns the interner's Locality equal to l, l itself the first
// time; a Locality with unknown fields is returned as it is.
func (in *Interner) Locality(l *federationpb.Locality) *federationpb.Locality {
	if l == nil || len(l.ProtoReflect().GetUnknown()) > 0 {
		return l
	}
	k := localityKey{l.GetRegion(), l.GetZone(), l.GetSubzone()}
	if v, ok := in.localities[k]; ok {
		return v
	}
	l.Region, l.Zone, l.Subzone = in.str(l.GetRegion()), in.str(l.GetZone()), in.str(l.GetSubzone())
	in.localities[k] = l
	return l
}

func (in *Interner) endpointPorts(ps []*federationpb.EndpointPort) []*federationpb.EndpointPort {
	if len(ps) == 0 {
		return ps
	}
	// EqualVT compares unknown fields too, and lastPorts has none.
	if slices.EqualFunc(ps, in.lastPorts, (*federationpb.EndpointPort).EqualVT) {
		return in.lastShared
	}
	if hasUnknown(ps) {
		return ps // sharing would mix them up
	}
	shared := in.sharedPorts(ps)
	in.lastPorts, in.lastShared = ps, shared
	return shared
}

func (in *Interner) sharedPorts(ps []*federationpb.EndpointPort) []*federationpb.EndpointPort {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.GetName())
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(int(p.GetProtocol())))
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(uint64(p.GetPort()), 10))
		b.WriteByte(0)
		b.WriteString(p.GetAppProtocol())
		b.WriteByte(0)
	}
	k := b.String()
	if v, ok := in.ports[k]; ok {
		return v
	}
	in.ports[k] = ps
	return ps
}

func hasUnknown(ps []*federationpb.EndpointPort) bool {
	for _, p := range ps {
		if len(p.ProtoReflect().GetUnknown()) > 0 {
			return true
		}
	}
	return false
}
