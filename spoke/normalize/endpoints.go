package normalize

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// Endpoints returns the endpoints of an exported service from its
// EndpointSlices: one per address, sorted by address. An address in
// several slices (the endpointslice controller moves endpoints between
// slices in steps) is one endpoint with the union of the ports, ready or
// serving when any copy is, and terminating only when all copies are.
//
// Only an endpoint's first address is used: Kubernetes declares the others
// fungible and kube-proxy ignores them too. Dual-stack services have one
// slice per family, so a dual-stack pod is two endpoints. FQDN slices and
// slices an MCS implementation imported from another cluster are skipped.
func Endpoints(in Inputs, o Options, svc *federationpb.Service) []*federationpb.Endpoint {
	if svc == nil {
		return nil
	}
	o = o.WithDefaults()
	clusterNetwork := ClusterNetwork(in, o)

	eps := slices.Clone(in.EndpointSlices(svc.GetNamespace(), svc.GetName()))
	// Merging keeps the first value of single-valued fields: make "first"
	// independent of the order Inputs returned.
	slices.SortFunc(eps, func(a, b *EndpointSlice) int { return strings.Compare(a.Name, b.Name) })

	byAddress := map[netip.Addr]*federationpb.Endpoint{}
	for _, slice := range eps {
		if slice.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		if c, ok := slice.Labels[LabelSourceCluster]; ok && c != o.ClusterID {
			continue
		}
		ports := endpointPorts(slice.Ports)
		for i := range slice.Endpoints {
			e := &slice.Endpoints[i]
			if e.Address == "" {
				continue
			}
			addr, err := netip.ParseAddr(e.Address)
			if err != nil || addr.Zone() != "" {
				continue
			}
			ep := endpoint(in, clusterNetwork, svc, slice.Namespace, e, addr, ports)
			if prev, ok := byAddress[addr]; ok {
				merge(prev, ep)
			} else {
				byAddress[addr] = ep
			}
		}
	}

	addrs := make([]netip.Addr, 0, len(byAddress))
	for addr := range byAddress {
		addrs = append(addrs, addr)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	out := make([]*federationpb.Endpoint, 0, len(addrs))
	for _, addr := range addrs {
		ep := byAddress[addr]
		slices.SortFunc(ep.Ports, compareEndpointPorts)
		out = append(out, ep)
	}
	return out
}

func endpoint(in Inputs, clusterNetwork string, svc *federationpb.Service, sliceNamespace string, e *SliceEndpoint, addr netip.Addr, ports []*federationpb.EndpointPort) *federationpb.Endpoint {
	// Kubernetes defaults: no ready condition means ready, no serving
	// condition means serving as ready.
	ready := e.Conditions.Ready == nil || *e.Conditions.Ready
	serving := ready
	if e.Conditions.Serving != nil {
		serving = *e.Conditions.Serving
	}
	ep := &federationpb.Endpoint{
		Namespace:   svc.GetNamespace(),
		Service:     svc.GetName(),
		Address:     addr.String(),
		Ports:       clonePorts(ports),
		Ready:       ready,
		Serving:     serving,
		Terminating: deref(e.Conditions.Terminating),
		Node:        e.Node,
		Locality:    nodeLocality(in, e.Node, e.Zone),
		Hostname:    e.Hostname,
	}

	ref := e.Target
	if ref == (Target{}) {
		return ep
	}
	ep.Workload = &federationpb.WorkloadRef{Kind: ref.Kind, Name: ref.Name, Uid: ref.UID}
	if ref.Kind != "Pod" {
		return ep
	}
	podNamespace := cmp.Or(ref.Namespace, sliceNamespace)
	var pod *Pod // nil when unknown: its namespace may still name a network
	if p, ok := in.Pod(podNamespace, ref.Name); ok {
		pod = p
	}
	if ep.Workload.Uid == "" && pod != nil {
		ep.Workload.Uid = string(pod.UID)
	}
	ep.Network = networkOverride(in, clusterNetwork, pod, podNamespace)
	return ep
}

// merge folds another copy of the same address into ep.
func merge(ep, other *federationpb.Endpoint) {
	for _, p := range other.Ports {
		if !slices.ContainsFunc(ep.Ports, func(q *federationpb.EndpointPort) bool { return compareEndpointPorts(p, q) == 0 }) {
			ep.Ports = append(ep.Ports, p)
		}
	}
	ep.Ready = ep.Ready || other.Ready
	ep.Serving = ep.Serving || other.Serving
	ep.Terminating = ep.Terminating && other.Terminating
	ep.Node = cmp.Or(ep.Node, other.Node)
	ep.Hostname = cmp.Or(ep.Hostname, other.Hostname)
	ep.Network = cmp.Or(ep.Network, other.Network)
	if ep.Locality == nil {
		ep.Locality = other.Locality
	}
	if ep.Workload == nil {
		ep.Workload = other.Workload
	}
}

// endpointPorts converts a slice's ports, skipping those without a number
// (the slice then means "all ports", which a federated service cannot
// express).
func endpointPorts(ports []discoveryv1.EndpointPort) []*federationpb.EndpointPort {
	var out []*federationpb.EndpointPort
	for _, p := range ports {
		if p.Port == nil {
			continue
		}
		port, ok := portNumber(*p.Port)
		if !ok {
			continue
		}
		out = append(out, &federationpb.EndpointPort{
			Name:        deref(p.Name),
			Protocol:    protocol(deref(p.Protocol)),
			AppProtocol: deref(p.AppProtocol),
			Port:        port,
		})
	}
	return out
}

// clonePorts gives each endpoint its own port messages, so that no two
// federation objects share a mutable message.
func clonePorts(ports []*federationpb.EndpointPort) []*federationpb.EndpointPort {
	out := make([]*federationpb.EndpointPort, len(ports))
	for i, p := range ports {
		out[i] = &federationpb.EndpointPort{Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port}
	}
	return out
}

func compareEndpointPorts(a, b *federationpb.EndpointPort) int {
	return cmp.Or(
		strings.Compare(a.GetName(), b.GetName()),
		cmp.Compare(a.GetPort(), b.GetPort()),
		cmp.Compare(a.GetProtocol(), b.GetProtocol()),
		strings.Compare(a.GetAppProtocol(), b.GetAppProtocol()),
	)
}
