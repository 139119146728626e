package normalize

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshfed/meshfed/federation"
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
//
// A slice that cannot be used (an address that is not one, a port out of
// range, more than [MaxEndpointsPerSlice] endpoints, an endpoint the
// federation's validation refuses) contributes nothing and is returned as
// a rejection: the caller may put a last good version of it in its place
// and call again. Leaving out only its bad endpoint would withdraw a
// backend of the service with no word.
func Endpoints(in Inputs, o Options, svc *federationpb.Service) ([]*federationpb.Endpoint, []*Rejection) {
	if svc == nil {
		return nil, nil
	}
	o = o.WithDefaults()
	clusterNetwork := ClusterNetwork(in, o)
	eps := slices.Clone(in.EndpointSlices(svc.GetNamespace(), svc.GetName()))
	// Merging keeps the first value of single-valued fields: make "first"
	// independent of the order Inputs returned.
	slices.SortFunc(eps, func(a, b *EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	byAddress := map[netip.Addr]*federationpb.Endpoint{}
	var rejected []*Rejection
	for _, slice := range eps {
		if slice.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		if c, ok := slice.Labels[LabelSourceCluster]; ok && c != o.ClusterID {
			continue
		}
		j := rejecter{kind: KindEndpointSlice, namespace: slice.Namespace, name: slice.Name, service: svc.GetNamespace() + "/" + svc.GetName()}
		found, rej := sliceEndpoints(in, j, clusterNetwork, svc, slice)
		if rej == nil {
			rej = mergeable(j, byAddress, found)
		}
		if rej != nil {
			rejected = append(rejected, rej)
			continue
		}
		for _, f := range found {
			if prev, ok := byAddress[f.addr]; ok {
				merge(prev, f.ep)
			} else {
				byAddress[f.addr] = f.ep
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
	return out, rejected
}

// sliceEndpoint is one endpoint of a slice, at index i.
type sliceEndpoint struct {
	i    int
	addr netip.Addr
	ep   *federationpb.Endpoint
}

// sliceEndpoints returns the endpoints of one slice, each valid, or the
// rejection of the slice.
func sliceEndpoints(in Inputs, j rejecter, clusterNetwork string, svc *federationpb.Service, slice *EndpointSlice) ([]sliceEndpoint, *Rejection) {
	if n := len(slice.Endpoints); n > MaxEndpointsPerSlice {
		return nil, j.reject(RejectTooManyEndpoints, "endpoints", strconv.Itoa(n), "%d endpoints is more than %d", n, MaxEndpointsPerSlice)
	}
	ports, rej := endpointPorts(j, slice.Ports)
	if rej != nil {
		return nil, rej
	}
	out := make([]sliceEndpoint, 0, len(slice.Endpoints))
	for i := range slice.Endpoints {
		e := &slice.Endpoints[i]
		f := "endpoints[" + strconv.Itoa(i) + "]"
		addr, rej := j.address(f+".addresses[0]", e.Address)
		if rej == nil {
			rej = j.utf8(f+".hostname", e.Hostname, f+".nodeName", e.Node, f+".zone", e.Zone,
				f+".targetRef.kind", e.Target.Kind, f+".targetRef.namespace", e.Target.Namespace,
				f+".targetRef.name", e.Target.Name, f+".targetRef.uid", e.Target.UID)
		}
		if rej != nil {
			return nil, rej
		}
		ep := endpoint(in, clusterNetwork, svc, slice.Namespace, e, addr.String(), ports)
		if err := federation.ValidateEndpoint(ep); err != nil {
			return nil, j.invalid(f, ep, err)
		}
		out = append(out, sliceEndpoint{i, addr, ep})
	}
	return out, nil
}

// mergeable rejects a slice whose endpoints, merged with the copies of
// the same addresses in the slices before it, would have too many ports.
func mergeable(j rejecter, byAddress map[netip.Addr]*federationpb.Endpoint, found []sliceEndpoint) *Rejection {
	for _, f := range found {
		prev, ok := byAddress[f.addr]
		if !ok {
			continue
		}
		n := len(prev.Ports)
		for _, p := range f.ep.Ports {
			if !slices.ContainsFunc(prev.Ports, func(q *federationpb.EndpointPort) bool { return compareEndpointPorts(p, q) == 0 }) {
				n++
			}
		}
		if n > federation.MaxPortsPerObject {
			return j.reject(RejectTooManyPorts, "endpoints["+strconv.Itoa(f.i)+"].addresses[0]", f.ep.GetAddress(),
				"the address's copies in this and other slices have %d ports together, more than %d", n, federation.MaxPortsPerObject)
		}
	}
	return nil
}

func endpoint(in Inputs, clusterNetwork string, svc *federationpb.Service, sliceNamespace string, e *SliceEndpoint, addr string, ports []*federationpb.EndpointPort) *federationpb.Endpoint {
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
		Address:     addr,
		Ports:       clonePorts(ports),
		Ready:       ready,
		Serving:     serving,
		Terminating: deref(e.Conditions.Terminating),
		Node:        e.Node,
		Locality:    nodeLocality(in, e.Node, e.Zone),
		Hostname:    e.Hostname,
	}

	ep.Plaintext = true // until a pod behind it says otherwise
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
	ep.Plaintext = !takesMeshTLS(pod)
	return ep
}

// takesMeshTLS reports whether a pod takes Istio mutual TLS: injected
// (Istio's injector labels it), or in ambient mode (istio-cni annotates
// it once its traffic is redirected). A pod not known yet does not: its
// endpoints are renormalized when it arrives.
func takesMeshTLS(pod *Pod) bool {
	return pod != nil && (pod.Labels[LabelTLSMode] == "istio" || pod.Annotations[AnnotationAmbientRedirection] == "enabled")
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
	ep.Plaintext = ep.Plaintext && other.Plaintext
	if ep.Locality == nil {
		ep.Locality = other.Locality
	}
	if ep.Workload == nil {
		ep.Workload = other.Workload
	}
}

// endpointPorts converts a slice's ports, skipping those without a number
// (the slice then means "all ports", which a federated service cannot
// express). A number out of range rejects the slice.
func endpointPorts(j rejecter, ports []discoveryv1.EndpointPort) ([]*federationpb.EndpointPort, *Rejection) {
	if len(ports) > federation.MaxPortsPerObject {
		return nil, j.reject(RejectTooManyPorts, "ports", strconv.Itoa(len(ports)), "%d ports is more than %d", len(ports), federation.MaxPortsPerObject)
	}
	var out []*federationpb.EndpointPort
	for i, p := range ports {
		if p.Port == nil {
			continue
		}
		f := "ports[" + strconv.Itoa(i) + "]"
		port, rej := j.port(f+".port", *p.Port)
		if rej == nil {
			rej = j.utf8(f+".name", deref(p.Name), f+".appProtocol", deref(p.AppProtocol))
		}
		if rej != nil {
			return nil, rej
		}
		out = append(out, &federationpb.EndpointPort{
			Name:        deref(p.Name),
			Protocol:    protocol(deref(p.Protocol)),
			AppProtocol: deref(p.AppProtocol),
			Port:        port,
		})
	}
	return out, nil
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
