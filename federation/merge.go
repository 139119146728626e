package federation

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// ClustersetDomain is the DNS domain of MCS-exported services.
const ClustersetDomain = "clusterset.local"

// TaggedEndpoint is an endpoint with the cluster and network it lives on.
type TaggedEndpoint struct {
	Cluster ClusterID
	Network NetworkID
	*federationpb.Endpoint
}

// TaggedWorkload is a workload with the cluster and network it lives on.
type TaggedWorkload struct {
	Cluster ClusterID
	Network NetworkID
	*federationpb.Workload
}

// WorkloadKey is a workload's key in the clusterset: "cluster/uid", since
// uids are unique only within a cluster.
func WorkloadKey(cluster ClusterID, uid string) string { return string(cluster) + "/" + uid }

// ClusterService is one cluster's export of a service.
type ClusterService struct {
	Cluster   ClusterID
	Network   NetworkID // the cluster's default network
	Service   *federationpb.Service
	Endpoints []TaggedEndpoint // sorted by address
	// Stale is true when the cluster's lease is stale: its endpoints are
	// served after every live cluster's.
	Stale bool
}

// Conflict reasons, as MCS ServiceExport Conflict conditions name them.
const (
	ReasonPortConflict = "PortConflict"
	ReasonTypeConflict = "TypeConflict"
)

// Conflict is an MCS export conflict: clusters whose export of a service
// disagrees with the oldest export.
type Conflict struct {
	Reason   string
	Clusters []ClusterID
	Message  string
}

// ServiceView is a service of the clusterset: the merge of every cluster's
// export of namespace/name. It is immutable.
type ServiceView struct {
	Key       string // namespace/name
	Namespace string
	Name      string
	// Hostname is the oldest export's cluster-local hostname.
	Hostname string
	// ClustersetHostname is <name>.<ns>.svc.clusterset.local when some
	// cluster exports the service through MCS, else "".
	ClustersetHostname string
	Type               federationpb.ServiceType
	// Ports is the union of the exports' ports (MCS: by name, then by
	// protocol and port; the oldest export wins a clash).
	Ports     []*federationpb.ServicePort
	Conflicts []Conflict
	// Clusters is sorted by cluster ID.
	Clusters []ClusterService
}

// EndpointCount is the number of endpoints over all clusters.
func (s *ServiceView) EndpointCount() int {
	n := 0
	for _, c := range s.Clusters {
		n += len(c.Endpoints)
	}
	return n
}

// MergeService merges the exports of one service by namespace sameness.
// parts must all have the same namespace/name; the result takes ownership
// of parts. It returns nil for no parts.
func MergeService(parts []ClusterService) *ServiceView {
	if len(parts) == 0 {
		return nil
	}
	slices.SortFunc(parts, func(a, b ClusterService) int { return cmp.Compare(a.Cluster, b.Cluster) })
	// Precedence: the oldest export first, cluster ID breaking ties.
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return parts[a].Service.GetExport().GetTime().AsTime().Compare(parts[b].Service.GetExport().GetTime().AsTime())
	})
	oldest := parts[order[0]].Service
	v := &ServiceView{
		Key:       KeyOfService(oldest),
		Namespace: oldest.GetNamespace(),
		Name:      oldest.GetName(),
		Hostname:  oldest.GetHostname(),
		Type:      oldest.GetType(),
		Clusters:  parts,
	}
	var typeConflict, portConflict []ClusterID
	byName := map[string]*federationpb.ServicePort{}
	byNumber := map[string]*federationpb.ServicePort{}
	for _, i := range order {
		p := parts[i]
		if p.Service.GetExport().GetSource() == federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT {
			v.ClustersetHostname = v.Name + "." + v.Namespace + ".svc." + ClustersetDomain
		}
		if isHeadless(p.Service.GetType()) != isHeadless(v.Type) {
			typeConflict = append(typeConflict, p.Cluster)
		}
		clash := false
		for _, port := range p.Service.GetPorts() {
			num := fmt.Sprintf("%s/%d", port.GetProtocol(), port.GetPort())
			prev, named := byName[port.GetName()]
			if !named {
				prev = byNumber[num]
			}
			if prev != nil {
				if prev.GetName() != port.GetName() || prev.GetPort() != port.GetPort() || prev.GetProtocol() != port.GetProtocol() {
					clash = true
				}
				continue
			}
			byName[port.GetName()] = port
			byNumber[num] = port
			v.Ports = append(v.Ports, port)
		}
		if clash {
			portConflict = append(portConflict, p.Cluster)
		}
	}
	slices.SortFunc(v.Ports, func(a, b *federationpb.ServicePort) int {
		return cmp.Or(cmp.Compare(a.GetPort(), b.GetPort()), cmp.Compare(a.GetProtocol(), b.GetProtocol()))
	})
	if len(typeConflict) > 0 {
		v.Conflicts = append(v.Conflicts, Conflict{
			Reason:   ReasonTypeConflict,
			Clusters: typeConflict,
			Message:  fmt.Sprintf("headlessness differs from the oldest export (cluster %s, type %s)", parts[order[0]].Cluster, typeName(v.Type)),
		})
	}
	if len(portConflict) > 0 {
		v.Conflicts = append(v.Conflicts, Conflict{
			Reason:   ReasonPortConflict,
			Clusters: portConflict,
			Message:  "ports clash by name or number with an older export; traffic to a clashing port goes only to exports that have it",
		})
	}
	return v
}

func isHeadless(t federationpb.ServiceType) bool {
	return t == federationpb.ServiceType_SERVICE_TYPE_HEADLESS
}

func typeName(t federationpb.ServiceType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "SERVICE_TYPE_"))
}

// TagEndpoints tags endpoints with their cluster and network (the
// endpoint's own network override, else the cluster's) and sorts them by
// address.
func TagEndpoints(cluster ClusterID, network NetworkID, eps []*federationpb.Endpoint) []TaggedEndpoint {
	out := make([]TaggedEndpoint, 0, len(eps))
	for _, e := range eps {
		n := network
		if e.GetNetwork() != "" {
			n = NetworkID(e.GetNetwork())
		}
		out = append(out, TaggedEndpoint{Cluster: cluster, Network: n, Endpoint: e})
	}
	slices.SortFunc(out, func(a, b TaggedEndpoint) int { return strings.Compare(a.GetAddress(), b.GetAddress()) })
	return out
}

// TagWorkload tags a workload with its cluster and network.
func TagWorkload(cluster ClusterID, network NetworkID, w *federationpb.Workload) *TaggedWorkload {
	if w.GetNetwork() != "" {
		network = NetworkID(w.GetNetwork())
	}
	return &TaggedWorkload{Cluster: cluster, Network: network, Workload: w}
}
