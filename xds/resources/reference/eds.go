package reference

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/xds/resources"
)

// LoadAssignment builds as messages the assignment a describes (see
// resources.Assignment), which resources.EncodeLoadAssignment encodes.
// Endpoints with equal metadata share one Metadata message.
func LoadAssignment(a resources.LoadAssignment) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: a.ClusterName}
	if len(a.Localities) == 0 {
		return cla
	}
	metas := make(map[metaKey]*corev3.Metadata)
	cla.Endpoints = make([]*endpointv3.LocalityLbEndpoints, 0, len(a.Localities))
	for _, l := range a.Localities {
		lbs := make([]*endpointv3.LbEndpoint, 0, len(l.Endpoints))
		for _, e := range l.Endpoints {
			k := metaKey{e.Cluster, e.Network}
			meta := metas[k]
			if meta == nil {
				meta = metadata(k)
				metas[k] = meta
			}
			lbs = append(lbs, lbEndpoint(e, meta))
		}
		cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{
			Locality: &corev3.Locality{
				Region:  l.Locality.Region,
				Zone:    l.Locality.Zone,
				SubZone: l.Locality.Subzone,
			},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(l.Weight),
			Priority:            l.Priority,
		})
	}
	return cla
}

type metaKey struct {
	cluster federation.ClusterID
	network federation.NetworkID
}

func lbEndpoint(e resources.LbEndpoint, meta *corev3.Metadata) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Protocol:      corev3.SocketAddress_TCP,
				Address:       e.Address,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: e.Port},
			}}},
		}},
		HealthStatus:        corev3.HealthStatus(e.Health),
		Metadata:            meta,
		LoadBalancingWeight: wrapperspb.UInt32(e.Weight),
	}
}

func metadata(k metaKey) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		resources.MetadataNamespace: {Fields: map[string]*structpb.Value{
			"cluster": structpb.NewStringValue(string(k.cluster)),
			"network": structpb.NewStringValue(string(k.network)),
		}},
	}}
}
