package federation

import (
	"strings"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// ClustersetDomain is the DNS domain of MCS-exported services.
const ClustersetDomain = "clusterset.local"

// ServiceKey is the key of a service in a shard and in the clusterset:
// "namespace/name". Services with the same key in several clusters are one
// service (namespace sameness).
func ServiceKey(namespace, name string) string { return namespace + "/" + name }

// EndpointKey is the key of an endpoint in a shard:
// "namespace/service/address".
func EndpointKey(ep *federationpb.Endpoint) string {
	return ep.GetNamespace() + "/" + ep.GetService() + "/" + ep.GetAddress()
}

// SplitEndpointKey returns the service key and the address of an endpoint
// key ("", "" for a key that is none).
func SplitEndpointKey(endpointKey string) (serviceKey, address string) {
	i := strings.LastIndexByte(endpointKey, '/')
	if i < 0 {
		return "", ""
	}
	return endpointKey[:i], endpointKey[i+1:]
}

// KeyOfService returns the key of svc.
func KeyOfService(svc *federationpb.Service) string {
	return ServiceKey(svc.GetNamespace(), svc.GetName())
}

// KeyOfWorkload returns the key of w: its uid.
func KeyOfWorkload(w *federationpb.Workload) string { return w.GetUid() }
