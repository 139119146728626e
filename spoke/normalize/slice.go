package normalize

import (
	discoveryv1 "k8s.io/api/discovery/v1"
)

// EndpointSlice is what normalization reads of an EndpointSlice. Sources
// hold these rather than EndpointSlices for the reason they hold [Pod]s: a
// spoke keeps one endpoint for every pod of its cluster, and a
// discoveryv1.Endpoint with its pointers and target reference is 400 bytes,
// a SliceEndpoint about half.
//
// The embedded metadata holds the name, namespace and the labels of [Keys]
// for [KindEndpointSlice].
type EndpointSlice struct {
	Meta

	AddressType discoveryv1.AddressType
	Ports       []discoveryv1.EndpointPort
	Endpoints   []SliceEndpoint
}

// SliceEndpoint is one endpoint of an [EndpointSlice].
type SliceEndpoint struct {
	// Address is the endpoint's first address ("" for none): Kubernetes
	// declares the others fungible and normalization ignores them.
	Address string
	// Conditions as the slice gives them (nil: not set). The pointers may
	// be shared: never write through them.
	Conditions discoveryv1.EndpointConditions

	Hostname, Node, Zone string
	// Target is the targetRef ("" Kind: none).
	Target Target
}

// Target is an endpoint's targetRef.
type Target struct {
	Kind, Namespace, Name, UID string
}

// EndpointSliceOf returns what normalization reads of s (nil for nil). It
// shares s's strings and ports.
func EndpointSliceOf(s *discoveryv1.EndpointSlice) *EndpointSlice {
	if s == nil {
		return nil
	}
	labels, _ := Keys(KindEndpointSlice)
	out := &EndpointSlice{
		Meta:        MetaOf(&s.ObjectMeta, labels, nil),
		AddressType: s.AddressType,
		Ports:       s.Ports,
	}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]SliceEndpoint, len(s.Endpoints))
		for i := range s.Endpoints {
			out.Endpoints[i] = sliceEndpointOf(&s.Endpoints[i])
		}
	}
	return out
}

func sliceEndpointOf(e *discoveryv1.Endpoint) SliceEndpoint {
	out := SliceEndpoint{
		Conditions: discoveryv1.EndpointConditions{
			Ready: shared(e.Conditions.Ready), Serving: shared(e.Conditions.Serving), Terminating: shared(e.Conditions.Terminating),
		},
		Hostname: deref(e.Hostname),
		Node:     deref(e.NodeName),
		Zone:     deref(e.Zone),
	}
	if len(e.Addresses) > 0 {
		out.Address = e.Addresses[0]
	}
	if r := e.TargetRef; r != nil {
		out.Target = Target{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: string(r.UID)}
	}
	return out
}

var sharedTrue, sharedFalse = true, false

// shared returns a pointer to a package-wide copy of *b: conditions cost no
// allocation per endpoint.
func shared(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &sharedTrue
	default:
		return &sharedFalse
	}
}
