package clusterset

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

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
//
// What an interner keeps is its own copy: the messages it reads may point
// into a receive buffer (syncproto.DecodeSpokeMessage), which keeping one
// of their strings would hold whole. A nil interner shares the messages'
// strings.
type Interner struct {
	strings    map[string]string
	localities map[localityKey]*federationpb.Locality
	ports      map[string][]*federationpb.EndpointPort
	groups     map[groupKey]*endpointGroup

	workloadGroups map[workloadGroup]*workloadGroup
	// lastPorts is the latest ports interned (the shared copy): a full
	// state's endpoints come service by service, so most are the previous
	// one's, compared without building a key.
	lastPorts []*federationpb.EndpointPort
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
	s = strings.Clone(s)
	in.strings[s] = s
	return s
}

type localityKey struct{ region, zone, subzone string }

// Locality returns the interner's Locality equal to l, a copy of l the
// first time; a Locality with unknown fields gets a copy of its own.
func (in *Interner) Locality(l *federationpb.Locality) *federationpb.Locality {
	if l == nil {
		return nil
	}
	if len(l.ProtoReflect().GetUnknown()) > 0 {
		return cloneLocality(l, strings.Clone) // sharing would mix them up
	}
	k := localityKey{l.GetRegion(), l.GetZone(), l.GetSubzone()}
	if v, ok := in.localities[k]; ok {
		return v
	}
	c := cloneLocality(l, in.str)
	in.localities[localityKey{c.Region, c.Zone, c.Subzone}] = c
	return c
}

// cloneLocality copies l, its strings through str, its unknown fields
// too.
func cloneLocality(l *federationpb.Locality, str func(string) string) *federationpb.Locality {
	c := &federationpb.Locality{Region: str(l.GetRegion()), Zone: str(l.GetZone()), Subzone: str(l.GetSubzone())}
	cloneUnknown(l, c)
	return c
}

func (in *Interner) endpointPorts(ps []*federationpb.EndpointPort) []*federationpb.EndpointPort {
	if len(ps) == 0 {
		return ps
	}
	// EqualVT compares unknown fields too, and lastPorts has none.
	if slices.EqualFunc(ps, in.lastPorts, (*federationpb.EndpointPort).EqualVT) {
		return in.lastPorts
	}
	if hasUnknown(ps) {
		return clonePorts(ps, strings.Clone) // sharing would mix them up
	}
	in.lastPorts = in.sharedPorts(ps)
	return in.lastPorts
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
	shared := clonePorts(ps, in.str)
	in.ports[k] = shared
	return shared
}

// clonePorts copies ps, its strings through str, its unknown fields
// too.
func clonePorts(ps []*federationpb.EndpointPort, str func(string) string) []*federationpb.EndpointPort {
	out := make([]*federationpb.EndpointPort, len(ps))
	for i, p := range ps {
		out[i] = &federationpb.EndpointPort{Name: str(p.GetName()), Protocol: p.GetProtocol(), AppProtocol: str(p.GetAppProtocol()), Port: p.GetPort()}
		cloneUnknown(p, out[i])
	}
	return out
}

// cloneUnknown sets to's unknown fields to a copy of from's.
func cloneUnknown(from, to proto.Message) {
	if unknown := from.ProtoReflect().GetUnknown(); len(unknown) > 0 {
		to.ProtoReflect().SetUnknown(slices.Clone(unknown))
	}
}

func hasUnknown(ps []*federationpb.EndpointPort) bool {
	for _, p := range ps {
		if len(p.ProtoReflect().GetUnknown()) > 0 {
			return true
		}
	}
	return false
}
