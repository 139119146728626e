package federation

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
// common (an endpointGroup), and an endpoint whose workload the hub knows
// reads its address, its node and its reference's name and uid from that
// workload: only what differs from it is the endpoint's own (an
// endpointExtra, rare: a hostname, an address, a node or reference of its
// own). Unknown fields are
// not kept: the hub reads none. It is immutable; Proto rebuilds the
// message.
type Endpoint struct {
	group *endpointGroup
	// workload is the workload the endpoint names, when its uid, name and
	// node are the endpoint's; it may be an older form of that workload
	// (those three never change in a pod's life).
	workload *Workload
	extra    *endpointExtra // nil when workload says it all
	// ip is 1 + the index of the endpoint's address among its workload's
	// addresses; 0: the address is extra's.
	ip      uint8
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

// endpointGroup is what the endpoints of one service in one zone share.
type endpointGroup struct {
	namespace, service, network, workloadKind string
	ports                                     []*federationpb.EndpointPort
	locality                                  *federationpb.Locality
}

// groupKey identifies an interned group: its strings, and its ports and
// locality by the interner's shared copies.
type groupKey struct {
	namespace, service, network, workloadKind string
	ports                                     *federationpb.EndpointPort // the first of the shared slice
	nPorts                                    int
	locality                                  *federationpb.Locality
}

// WorkloadRef names the workload behind an endpoint.
type WorkloadRef struct {
	Kind, Name, UID string
}

// NewEndpoint returns the hub's form of an endpoint message, sharing
// nothing with other endpoints (the registry interns; see
// Interner.Endpoint).
func NewEndpoint(pb *federationpb.Endpoint) *Endpoint { return (*Interner)(nil).Endpoint(pb, nil) }

// NewEndpoints converts messages with NewEndpoint.
func NewEndpoints(pbs ...*federationpb.Endpoint) []*Endpoint {
	out := make([]*Endpoint, len(pbs))
	for i, pb := range pbs {
		out[i] = NewEndpoint(pb)
	}
	return out
}

// Endpoint returns the hub's form of pb, sharing its group with the
// interner's other endpoints of the same service, zone and ports, and its
// workload reference's strings with w, the workload it names (nil: not
// known). A nil interner shares nothing.
func (in *Interner) Endpoint(pb *federationpb.Endpoint, w *Workload) *Endpoint {
	g := endpointGroup{
		namespace: pb.GetNamespace(), service: pb.GetService(), network: pb.GetNetwork(),
		workloadKind: pb.GetWorkload().GetKind(), ports: pb.GetPorts(), locality: pb.GetLocality(),
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
		if i, ok := w.ipIndex(x.address); ok && i < math.MaxUint8 {
			e.ip, x.address = uint8(i+1), ""
		}
	}
	if x != (endpointExtra{}) {
		if in != nil {
			x.node = in.str(x.node)
			x.address = strings.Clone(x.address) // not the decoder's message
		}
		e.extra = new(endpointExtra) // not &x: x would be allocated for every endpoint
		*e.extra = x
	}
	if in == nil {
		e.group = &endpointGroup{}
		*e.group = g
		return e
	}
	g.namespace, g.service, g.network, g.workloadKind = in.str(g.namespace), in.str(g.service), in.str(g.network), in.str(g.workloadKind)
	g.locality = in.Locality(g.locality)
	g.ports = in.endpointPorts(g.ports)
	k := groupKey{namespace: g.namespace, service: g.service, network: g.network, workloadKind: g.workloadKind, nPorts: len(g.ports), locality: g.locality}
	if len(g.ports) > 0 {
		k.ports = g.ports[0]
	}
	// Allocated once per group, not per endpoint: g stays on the stack.
	if e.group = in.groups[k]; e.group == nil {
		e.group = &endpointGroup{}
		*e.group = g
		in.groups[k] = e.group
	}
	return e
}

// Proto returns the endpoint as a message, sharing its ports and
// locality.
func (e *Endpoint) Proto() *federationpb.Endpoint {
	pb := &federationpb.Endpoint{
		Namespace: e.GetNamespace(), Service: e.GetService(), Address: e.GetAddress(), Ports: e.GetPorts(),
		Ready: e.ready, Serving: e.serving, Terminating: e.terminating, Node: e.GetNode(), Locality: e.GetLocality(),
		Hostname: e.GetHostname(), Network: e.GetNetwork(),
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
		e.hasWorkload == o.hasWorkload && e.group.equal(o.group)
}

func (g *endpointGroup) equal(o *endpointGroup) bool {
	if g == o {
		return true
	}
	return g.namespace == o.namespace && g.service == o.service && g.network == o.network &&
		g.workloadKind == o.workloadKind && g.locality.EqualVT(o.locality) &&
		slices.EqualFunc(g.ports, o.ports, (*federationpb.EndpointPort).EqualVT)
}

// The getters are named as the message's, so that readers of either read
// alike. Like the message's, they are safe on nil: a nil endpoint reads as
// noEndpoint.

var noEndpoint = Endpoint{group: &endpointGroup{}, extra: &endpointExtra{}}

func (e *Endpoint) orNone() *Endpoint {
	if e == nil {
		return &noEndpoint
	}
	return e
}

// GetNamespace is the namespace of the endpoint's service.
func (e *Endpoint) GetNamespace() string { return e.orNone().group.namespace }

// GetService is the name of the endpoint's service.
func (e *Endpoint) GetService() string { return e.orNone().group.service }

// GetAddress is the endpoint's IP address.
func (e *Endpoint) GetAddress() string {
	if e = e.orNone(); e.ip == 0 {
		if e.extra == nil {
			return ""
		}
		return e.extra.address
	}
	return e.workload.ipAt(int(e.ip) - 1)
}

// GetPorts returns the endpoint's ports, shared: do not modify them.
func (e *Endpoint) GetPorts() []*federationpb.EndpointPort { return e.orNone().group.ports }

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
func (e *Endpoint) GetLocality() *federationpb.Locality { return e.orNone().group.locality }

// GetHostname is the endpoint's DNS hostname, for headless services.
func (e *Endpoint) GetHostname() string {
	if e = e.orNone(); e.extra == nil {
		return ""
	}
	return e.extra.hostname
}

// GetNetwork is the endpoint's own network, overriding its cluster's
// ("": its cluster's).
func (e *Endpoint) GetNetwork() string { return e.orNone().group.network }

// Workload returns the reference to the endpoint's workload, if it has
// one.
func (e *Endpoint) Workload() (WorkloadRef, bool) {
	if e = e.orNone(); !e.hasWorkload {
		return WorkloadRef{}, false
	}
	return WorkloadRef{Kind: e.group.workloadKind, Name: e.workloadName(), UID: e.workloadUID()}, true
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
