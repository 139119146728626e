package clusterset

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Endpoint is an endpoint as the hub holds it. The generated message and
// its workload reference take 288 bytes before their strings; this takes
// 32. The endpoints of one service in one zone share what they have in
// common (an endpointGroup, their tag included), and an endpoint whose
// workload the hub knows reads its address, its node and its reference's
// name and uid from that workload: only what differs from it is the
// endpoint's own (an endpointExtra, rare: a hostname, an address, a node
// or reference of its own). Unknown fields are not kept: the hub reads
// none. It is immutable; Proto rebuilds the message.
type Endpoint struct {
	// The group is embedded for its tag: a TaggedEndpoint, one pointer,
	// reads its cluster and network from it.
	*endpointGroup
	// workload is the workload the endpoint names, when its uid, name and
	// node are the endpoint's; it may be an older form of that workload
	// (those three never change in a pod's life).
	workload *Workload
	extra    *endpointExtra // nil when workload says it all
	// The endpoint's address is workload.s[ipStart:ipStart+ipLen], one of
	// its workload's; ipLen 0: it is extra's.
	ipStart uint16
	ipLen   uint8
	ready   bool
	serving bool
	// terminating and hasWorkload: the message had a workload reference,
	// even an empty one.
	terminating bool
	hasWorkload bool
}

// endpointExtra is what an endpoint holds that its workload does not say.
type endpointExtra struct {
	address, node, hostname, workloadName, workloadUID string
}

// endpointGroup is what the endpoints of one service in one zone share,
// their tag (cluster and network) included.
type endpointGroup struct {
	*Tag
	namespace, service, network, workloadKind string
	ports                                     []*federationpb.EndpointPort
	locality                                  *federationpb.Locality
	// plaintext: the endpoints take no Istio mutual TLS. Pods of one
	// service are injected alike, so this costs no groups.
	plaintext bool
}

// untagged is the tag of endpoints made without their cluster's tags.
var untagged = &Tag{}

// groupKey identifies an interned group: its strings, and its ports and
// locality by the interner's shared copies.
type groupKey struct {
	tag                                       *Tag
	namespace, service, network, workloadKind string
	ports                                     *federationpb.EndpointPort // the first of the shared slice
	nPorts                                    int
	locality                                  *federationpb.Locality
	plaintext                                 bool
}

// WorkloadRef names the workload behind an endpoint.
type WorkloadRef struct {
	Kind, Name, UID string
}

// NewEndpoint returns the hub's form of an endpoint message, sharing
// nothing with other endpoints (the registry interns; see
// Interner.Endpoint).
func NewEndpoint(pb *federationpb.Endpoint) *Endpoint { return (*Interner)(nil).Endpoint(nil, pb, nil) }

// NewEndpoints converts messages with NewEndpoint.
func NewEndpoints(pbs ...*federationpb.Endpoint) []*Endpoint {
	out := make([]*Endpoint, len(pbs))
	for i, pb := range pbs {
		out[i] = NewEndpoint(pb)
	}
	return out
}

// Endpoint returns the hub's form of pb, an endpoint of the cluster whose
// tags hand out its tag (nil: untagged), sharing its group with the
// interner's other endpoints of the same service, zone, ports and tag,
// and its workload reference's strings with w, the workload it names
// (nil: not known). A nil interner shares nothing.
func (in *Interner) Endpoint(tags *Tags, pb *federationpb.Endpoint, w *Workload) *Endpoint {
	g := endpointGroup{
		Tag: untagged, namespace: pb.GetNamespace(), service: pb.GetService(), network: pb.GetNetwork(),
		workloadKind: pb.GetWorkload().GetKind(), ports: pb.GetPorts(), locality: pb.GetLocality(), plaintext: pb.GetPlaintext(),
	}
	if tags != nil {
		g.Tag = tags.Of(g.network)
	}
	e := &Endpoint{
		ready: pb.GetReady(), serving: pb.GetServing(), terminating: pb.GetTerminating(), hasWorkload: pb.GetWorkload() != nil,
	}
	x := endpointExtra{
		address: pb.GetAddress(), node: pb.GetNode(), hostname: pb.GetHostname(),
		workloadName: pb.GetWorkload().GetName(), workloadUID: pb.GetWorkload().GetUid(),
	}
	if w != nil && e.hasWorkload && w.GetUid() == x.workloadUID && w.GetName() == x.workloadName && w.node == x.node {
		e.workload = w
		x.node, x.workloadName, x.workloadUID = "", "", ""
		if i, ok := w.ipOffset(x.address); ok && i <= math.MaxUint16 && len(x.address) <= math.MaxUint8 {
			e.ipStart, e.ipLen, x.address = uint16(i), uint8(len(x.address)), ""
		}
	}
	if x != (endpointExtra{}) {
		if in != nil {
			x.node = in.str(x.node)
			x.address, x.hostname = strings.Clone(x.address), strings.Clone(x.hostname)
			x.workloadName, x.workloadUID = strings.Clone(x.workloadName), strings.Clone(x.workloadUID)
		}
		e.extra = new(endpointExtra) // not &x: x would be allocated for every endpoint
		*e.extra = x
	}
	e.endpointGroup = in.endpointGroup(g)
	return e
}

// endpointGroup returns the interner's group equal to g, interning its
// strings, ports and locality the first time.
func (in *Interner) endpointGroup(g endpointGroup) *endpointGroup {
	if in == nil {
		p := new(endpointGroup)
		*p = g
		return p
	}
	g.namespace, g.service, g.network, g.workloadKind = in.str(g.namespace), in.str(g.service), in.str(g.network), in.str(g.workloadKind)
	g.locality = in.Locality(g.locality)
	g.ports = in.endpointPorts(g.ports)
	k := groupKey{tag: g.Tag, namespace: g.namespace, service: g.service, network: g.network, workloadKind: g.workloadKind, nPorts: len(g.ports), locality: g.locality, plaintext: g.plaintext}
	if len(g.ports) > 0 {
		k.ports = g.ports[0]
	}
	// Allocated once per group, not per endpoint: g stays on the stack.
	p := in.groups[k]
	if p == nil {
		p = new(endpointGroup)
		*p = g
		in.groups[k] = p
	}
	return p
}

// RetagEndpoint returns e with the tag tags give it now (its cluster's
// network changed), e itself when that is the tag it has.
func (in *Interner) RetagEndpoint(tags *Tags, e *Endpoint) *Endpoint {
	g := *e.endpointGroup
	if g.Tag = tags.Of(g.network); *g.Tag == *e.Tag {
		return e
	}
	out := *e
	out.endpointGroup = in.endpointGroup(g)
	return &out
}

// Proto returns the endpoint as a message, sharing its ports and
// locality.
func (e *Endpoint) Proto() *federationpb.Endpoint {
	pb := &federationpb.Endpoint{
		Namespace: e.GetNamespace(), Service: e.GetService(), Address: e.GetAddress(), Ports: e.GetPorts(),
		Ready: e.ready, Serving: e.serving, Terminating: e.terminating, Node: e.GetNode(), Locality: e.GetLocality(),
		Hostname: e.GetHostname(), Network: e.GetNetwork(), Plaintext: e.GetPlaintext(),
	}
	if ref, ok := e.Workload(); ok {
		pb.Workload = &federationpb.WorkloadRef{Kind: ref.Kind, Name: ref.Name, Uid: ref.UID}
	}
	return pb
}

// Equal reports whether e and o hold the same endpoint.
func (e *Endpoint) Equal(o *Endpoint) bool {
	if e == nil || o == nil {
		return e == o
	}
	return e.GetAddress() == o.GetAddress() && e.GetNode() == o.GetNode() && e.GetHostname() == o.GetHostname() &&
		e.workloadName() == o.workloadName() && e.workloadUID() == o.workloadUID() &&
		e.ready == o.ready && e.serving == o.serving && e.terminating == o.terminating &&
		e.hasWorkload == o.hasWorkload && e.equal(o.endpointGroup)
}

func (g *endpointGroup) equal(o *endpointGroup) bool {
	if g == o {
		return true
	}
	return g.Tag.equal(o.Tag) && g.namespace == o.namespace && g.service == o.service && g.network == o.network &&
		g.workloadKind == o.workloadKind && g.plaintext == o.plaintext && g.locality.EqualVT(o.locality) &&
		slices.EqualFunc(g.ports, o.ports, (*federationpb.EndpointPort).EqualVT)
}

// The getters are named as the message's, so that readers of either read
// alike. Like the message's, they are safe on nil: a nil endpoint reads as
// noEndpoint.

var noEndpoint = Endpoint{endpointGroup: &endpointGroup{Tag: untagged}, extra: &endpointExtra{}}

func (e *Endpoint) orNone() *Endpoint {
	if e == nil {
		return &noEndpoint
	}
	return e
}

// GetPlaintext reports the endpoint taking no Istio mutual TLS: no
// east-west gateway can forward to it (see Behind).
func (e *Endpoint) GetPlaintext() bool { return e.orNone().plaintext }

// GetNamespace is the namespace of the endpoint's service.
func (e *Endpoint) GetNamespace() string { return e.orNone().namespace }

// GetService is the name of the endpoint's service.
func (e *Endpoint) GetService() string { return e.orNone().service }

// GetAddress is the endpoint's IP address.
func (e *Endpoint) GetAddress() string {
	if e = e.orNone(); e.ipLen == 0 {
		if e.extra == nil {
			return ""
		}
		return e.extra.address
	}
	return e.workload.s[e.ipStart : int(e.ipStart)+int(e.ipLen)]
}

// GetPorts returns the endpoint's ports, shared: do not modify them.
func (e *Endpoint) GetPorts() []*federationpb.EndpointPort { return e.orNone().ports }

// GetReady reports the endpoint ready.
func (e *Endpoint) GetReady() bool { return e.orNone().ready }

// GetServing reports the endpoint serving (ready or not, while it terminates).
func (e *Endpoint) GetServing() bool { return e.orNone().serving }

// GetTerminating reports the endpoint terminating.
func (e *Endpoint) GetTerminating() bool { return e.orNone().terminating }

// GetNode is the name of the endpoint's node.
func (e *Endpoint) GetNode() string {
	if e = e.orNone(); e.extra == nil {
		return e.workload.GetNode()
	}
	return cmp.Or(e.extra.node, e.workload.GetNode())
}

// GetLocality returns the endpoint's locality, shared: do not modify it.
func (e *Endpoint) GetLocality() *federationpb.Locality { return e.orNone().locality }

// GetHostname is the endpoint's DNS hostname, for headless services.
func (e *Endpoint) GetHostname() string {
	if e = e.orNone(); e.extra == nil {
		return ""
	}
	return e.extra.hostname
}

// GetNetwork is the endpoint's own network, overriding its cluster's
// ("": its cluster's).
func (e *Endpoint) GetNetwork() string { return e.orNone().network }

// Workload returns the reference to the endpoint's workload, if it has
// one.
func (e *Endpoint) Workload() (WorkloadRef, bool) {
	if e = e.orNone(); !e.hasWorkload {
		return WorkloadRef{}, false
	}
	return WorkloadRef{Kind: e.workloadKind, Name: e.workloadName(), UID: e.workloadUID()}, true
}

func (e *Endpoint) workloadName() string {
	if e.workload != nil {
		return e.workload.GetName()
	}
	if e.extra != nil {
		return e.extra.workloadName
	}
	return ""
}

func (e *Endpoint) workloadUID() string {
	if e.workload != nil {
		return e.workload.GetUid()
	}
	if e.extra != nil {
		return e.extra.workloadUID
	}
	return ""
}
