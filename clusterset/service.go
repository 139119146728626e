package clusterset

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Tag is where an object lives: its cluster and network. The objects of
// one cluster and network share one (see Tags), held by their groups: a
// tagged endpoint or workload is one pointer, not two strings and a
// pointer.
type Tag struct {
	Cluster federation.ClusterID
	Network federation.NetworkID
}

func (t *Tag) equal(o *Tag) bool {
	if t == nil || o == nil {
		return t == o
	}
	return *t == *o
}

// Tags hands out a cluster's tags: one for its network, one for each
// network an object of it overrides that with. Not safe for concurrent
// use; the tags it hands out are immutable.
type Tags struct {
	cluster   Tag
	overrides map[federation.NetworkID]*Tag
}

// NewTags returns the tags of a cluster on network.
func NewTags(cluster federation.ClusterID, network federation.NetworkID) *Tags {
	return &Tags{cluster: Tag{Cluster: cluster, Network: network}}
}

// Of returns the tag of an object whose own network is override ("": the
// cluster's).
func (t *Tags) Of(override string) *Tag {
	if override == "" || federation.NetworkID(override) == t.cluster.Network {
		return &t.cluster
	}
	if tag, ok := t.overrides[federation.NetworkID(override)]; ok {
		return tag
	}
	if t.overrides == nil {
		t.overrides = map[federation.NetworkID]*Tag{}
	}
	tag := &Tag{Cluster: t.cluster.Cluster, Network: federation.NetworkID(override)}
	t.overrides[tag.Network] = tag
	return tag
}

// TaggedEndpoint is an endpoint with the cluster and network it lives on,
// which its group holds: one pointer, read as Tag, Cluster and Network.
type TaggedEndpoint struct {
	*Endpoint
}

// TaggedWorkload is a workload with the cluster and network it lives on,
// read from the workload itself (see Workload.Tagged): it is passed by
// value and held by no one.
type TaggedWorkload struct {
	*Tag
	*Workload
}

// WorkloadKey is a workload's key in the clusterset: "cluster/uid", since
// uids are unique only within a cluster.
func WorkloadKey(cluster federation.ClusterID, uid string) string { return string(cluster) + "/" + uid }

// ClusterService is one cluster's export of a service.
type ClusterService struct {
	Cluster   federation.ClusterID
	Network   federation.NetworkID // the cluster's default network
	Service   *federationpb.Service
	Endpoints []TaggedEndpoint // sorted by address
	// Stale is true when the cluster's lease is stale: its endpoints are
	// served after every live cluster's.
	Stale bool
}

// Conflict reasons, as MCS ServiceExport Conflict conditions name them
// (KEP-1645, sigs.k8s.io/mcs-api v1beta1).
const (
	ReasonPortConflict                  = "PortConflict"
	ReasonTypeConflict                  = "TypeConflict"
	ReasonSessionAffinityConflict       = "SessionAffinityConflict"
	ReasonSessionAffinityConfigConflict = "SessionAffinityConfigConflict"
	ReasonInternalTrafficPolicyConflict = "InternalTrafficPolicyConflict"
	ReasonTrafficDistributionConflict   = "TrafficDistributionConflict"
	ReasonIPFamilyConflict              = "IPFamilyConflict"
	ReasonLabelsConflict                = "LabelsConflict"
	ReasonAnnotationsConflict           = "AnnotationsConflict"
)

// Conflict is an MCS export conflict: clusters whose export of a service
// disagrees with the oldest export on one property. The oldest export's
// value is the import's; every export of the service reports the conflict.
type Conflict struct {
	Reason   string
	Clusters []federation.ClusterID
	Message  string
}

// ServiceView is a service of the clusterset: the merge of every cluster's
// export of namespace/name. It is immutable. What the hub decides about
// it across clusters, when it is an MCS import, is its Import.
type ServiceView struct {
	Key       string // namespace/name
	Namespace string
	Name      string
	// Hostname is the oldest export's cluster-local hostname.
	Hostname string
	// ClustersetHostname is <name>.<ns>.svc.clusterset.local when some
	// cluster exports the service through MCS, else "". Such a service is
	// an MCS import: every member cluster holds a ServiceImport of it.
	ClustersetHostname string
	Type               federationpb.ServiceType
	// Ports is the union of the exports' ports (MCS: by name, then by
	// protocol and port; the oldest export wins a clash).
	Ports     []*federationpb.ServicePort
	Conflicts []Conflict
	// Oldest is the export that wins every conflict: the import takes its
	// session affinity, traffic policy and distribution, IP families and
	// exported labels and annotations.
	Oldest *federationpb.Service
	// OldestCluster is the cluster of Oldest.
	OldestCluster federation.ClusterID
	// Clusters is sorted by cluster ID.
	Clusters []ClusterService
}

// IsImport reports whether the service is an MCS import.
func (s *ServiceView) IsImport() bool { return s.ClustersetHostname != "" }

// Headless reports whether the service, as the oldest export has it, is
// headless (an MCS import of type Headless).
func (s *ServiceView) Headless() bool { return isHeadless(s.Type) }

// ImportFamilies are the IP families of the import's ClusterSetIPs: the
// oldest export's, else those of its cluster IPs, else IPv4.
func (s *ServiceView) ImportFamilies() []federationpb.IPFamily {
	if f := s.Oldest.GetIpFamilies(); len(f) > 0 {
		return f
	}
	var out []federationpb.IPFamily
	for _, ip := range s.Oldest.GetClusterIps() {
		f := federationpb.IPFamily_IP_FAMILY_IPV4
		if strings.Contains(ip, ":") {
			f = federationpb.IPFamily_IP_FAMILY_IPV6
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		out = []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4}
	}
	return out
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
//
// The merge follows KEP-1645: the oldest export (its time, then its
// cluster ID) wins every conflicting property; ports are the union of the
// exports' ports by name, a port of the same name (or the same number)
// that differs being a conflict; every other property is a conflict when
// an export's differs from the oldest's.
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
	first := parts[order[0]]
	oldest := first.Service
	v := &ServiceView{
		Key:           federation.KeyOfService(oldest),
		Namespace:     oldest.GetNamespace(),
		Name:          oldest.GetName(),
		Hostname:      oldest.GetHostname(),
		Type:          oldest.GetType(),
		Oldest:        oldest,
		OldestCluster: first.Cluster,
		Clusters:      parts,
	}
	byName := map[string]*federationpb.ServicePort{}
	byNumber := map[string]*federationpb.ServicePort{}
	differ := make([][]federation.ClusterID, len(properties))
	var portConflict []federation.ClusterID
	for _, i := range order {
		p := parts[i]
		if p.Service.GetExport().GetSource() == federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT {
			v.ClustersetHostname = v.Name + "." + v.Namespace + ".svc." + federation.ClustersetDomain
		}
		for j, prop := range properties {
			if !prop.same(oldest, p.Service) {
				differ[j] = append(differ[j], p.Cluster)
			}
		}
		// MCS asks every export to report a conflict when the exports'
		// port sets differ at all, the import taking their union.
		clash := !samePorts(oldest.GetPorts(), p.Service.GetPorts())
		for _, port := range p.Service.GetPorts() {
			num := fmt.Sprintf("%s/%d", port.GetProtocol(), port.GetPort())
			prev, named := byName[port.GetName()]
			if !named {
				prev = byNumber[num]
			}
			if prev != nil {
				if prev.GetName() != port.GetName() || prev.GetPort() != port.GetPort() ||
					prev.GetProtocol() != port.GetProtocol() || prev.GetAppProtocol() != port.GetAppProtocol() {
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
	if len(portConflict) > 0 {
		v.Conflicts = append(v.Conflicts, Conflict{
			Reason:   ReasonPortConflict,
			Clusters: portConflict,
			Message: fmt.Sprintf("cluster%s exports other ports than the oldest export (cluster %s: %s); the import takes every export's ports, the oldest export's where two differ in number, protocol or app protocol under one name or number (import: %s)",
				joinClusters(portConflict), first.Cluster, portsString(oldest.GetPorts()), portsString(v.Ports)),
		})
	}
	for j, prop := range properties {
		if len(differ[j]) == 0 {
			continue
		}
		v.Conflicts = append(v.Conflicts, Conflict{
			Reason:   prop.reason,
			Clusters: differ[j],
			Message: fmt.Sprintf("cluster%s exports %s other than the oldest export (cluster %s: %s), which the import takes",
				joinClusters(differ[j]), prop.name, first.Cluster, prop.show(oldest)),
		})
	}
	// The most telling first: a ServiceExport's Conflict condition carries
	// the first one's reason.
	slices.SortFunc(v.Conflicts, func(a, b Conflict) int {
		return cmp.Compare(slices.Index(conflictOrder, a.Reason), slices.Index(conflictOrder, b.Reason))
	})
	return v
}

// conflictOrder ranks conflicts by how much they change what clients of
// the import get.
var conflictOrder = []string{
	ReasonTypeConflict, ReasonPortConflict, ReasonIPFamilyConflict, ReasonSessionAffinityConflict,
	ReasonSessionAffinityConfigConflict, ReasonInternalTrafficPolicyConflict, ReasonTrafficDistributionConflict,
	ReasonLabelsConflict, ReasonAnnotationsConflict,
}

// property is one export property that MCS resolves by the oldest export.
type property struct {
	reason, name string
	same         func(a, b *federationpb.Service) bool
	show         func(*federationpb.Service) string
}

var properties = []property{
	{
		ReasonTypeConflict, "a type (ClusterSetIP or Headless)",
		func(a, b *federationpb.Service) bool { return isHeadless(a.GetType()) == isHeadless(b.GetType()) },
		func(s *federationpb.Service) string { return importType(s.GetType()) },
	},
	{
		ReasonSessionAffinityConflict, "a sessionAffinity",
		func(a, b *federationpb.Service) bool { return a.GetSessionAffinity() == b.GetSessionAffinity() },
		func(s *federationpb.Service) string { return SessionAffinityName(s.GetSessionAffinity()) },
	},
	{
		ReasonSessionAffinityConfigConflict, "a sessionAffinityConfig",
		func(a, b *federationpb.Service) bool {
			return a.GetSessionAffinityTimeoutSeconds() == b.GetSessionAffinityTimeoutSeconds()
		},
		func(s *federationpb.Service) string {
			if t := s.GetSessionAffinityTimeoutSeconds(); t != 0 {
				return fmt.Sprintf("clientIP.timeoutSeconds %d", t)
			}
			return "none"
		},
	},
	{
		ReasonInternalTrafficPolicyConflict, "an internalTrafficPolicy",
		func(a, b *federationpb.Service) bool {
			return a.GetInternalTrafficPolicy() == b.GetInternalTrafficPolicy()
		},
		func(s *federationpb.Service) string { return orNone(s.GetInternalTrafficPolicy()) },
	},
	{
		ReasonTrafficDistributionConflict, "a trafficDistribution",
		func(a, b *federationpb.Service) bool { return a.GetTrafficDistribution() == b.GetTrafficDistribution() },
		func(s *federationpb.Service) string { return orNone(s.GetTrafficDistribution()) },
	},
	{
		ReasonIPFamilyConflict, "IP families",
		func(a, b *federationpb.Service) bool { return slices.Equal(a.GetIpFamilies(), b.GetIpFamilies()) },
		func(s *federationpb.Service) string { return familiesString(s.GetIpFamilies()) },
	},
	{
		ReasonLabelsConflict, "exported labels",
		func(a, b *federationpb.Service) bool {
			return keyValuesEqual(a.GetExport().GetLabels(), b.GetExport().GetLabels())
		},
		func(s *federationpb.Service) string { return keyValuesString(s.GetExport().GetLabels()) },
	},
	{
		ReasonAnnotationsConflict, "exported annotations",
		func(a, b *federationpb.Service) bool {
			return keyValuesEqual(a.GetExport().GetAnnotations(), b.GetExport().GetAnnotations())
		},
		func(s *federationpb.Service) string { return keyValuesString(s.GetExport().GetAnnotations()) },
	},
}

func isHeadless(t federationpb.ServiceType) bool {
	return t == federationpb.ServiceType_SERVICE_TYPE_HEADLESS
}

// importType is the MCS ServiceImport type of an export of type t.
func importType(t federationpb.ServiceType) string {
	if isHeadless(t) {
		return "Headless"
	}
	return "ClusterSetIP"
}

// SessionAffinityName is a session affinity as Kubernetes spells it.
func SessionAffinityName(a federationpb.SessionAffinity) string {
	if a == federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP {
		return "ClientIP"
	}
	return "None"
}

// IPFamilyName is an IP family as Kubernetes spells it.
func IPFamilyName(f federationpb.IPFamily) string {
	switch f {
	case federationpb.IPFamily_IP_FAMILY_IPV4:
		return "IPv4"
	case federationpb.IPFamily_IP_FAMILY_IPV6:
		return "IPv6"
	}
	return "unknown"
}

func familiesString(fs []federationpb.IPFamily) string {
	if len(fs) == 0 {
		return "none"
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = IPFamilyName(f)
	}
	return strings.Join(names, ",")
}

func keyValuesEqual(a, b []*federationpb.KeyValue) bool {
	return slices.EqualFunc(a, b, func(x, y *federationpb.KeyValue) bool {
		return x.GetKey() == y.GetKey() && x.GetValue() == y.GetValue()
	})
}

// keyValuesString shows keys only: values can be long, and the message
// names what differs, not all of it.
func keyValuesString(kvs []*federationpb.KeyValue) string {
	if len(kvs) == 0 {
		return "none"
	}
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.GetKey()
	}
	return "keys " + strings.Join(keys, ",")
}

// samePorts reports whether two exports' port lists hold the same ports
// as an import sees them (name, protocol, app protocol and number; target
// ports are each cluster's own), in any order.
func samePorts(a, b []*federationpb.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		if !slices.ContainsFunc(b, func(q *federationpb.ServicePort) bool {
			return p.GetName() == q.GetName() && p.GetProtocol() == q.GetProtocol() &&
				p.GetAppProtocol() == q.GetAppProtocol() && p.GetPort() == q.GetPort()
		}) {
			return false
		}
	}
	return true
}

func portsString(ports []*federationpb.ServicePort) string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = fmt.Sprintf("%s %d/%s", orNone(p.GetName()), p.GetPort(), strings.TrimPrefix(p.GetProtocol().String(), "PROTOCOL_"))
	}
	return strings.Join(out, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func joinClusters(ids []federation.ClusterID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	if len(s) > 1 {
		return "s " + strings.Join(s, ", ")
	}
	return " " + s[0]
}

// TagEndpoint tags e with its cluster and network (the endpoint's own
// network override, else the cluster's), as a copy if it had another tag.
func TagEndpoint(tags *Tags, e *Endpoint) TaggedEndpoint {
	return TaggedEndpoint{(*Interner)(nil).RetagEndpoint(tags, e)}
}

// TagEndpoints tags endpoints with their cluster and network (the
// endpoint's own network override, else the cluster's) and sorts them by
// address.
func TagEndpoints(tags *Tags, eps []*Endpoint) []TaggedEndpoint {
	out := make([]*Endpoint, len(eps))
	for i, e := range eps {
		out[i] = (*Interner)(nil).RetagEndpoint(tags, e)
	}
	return SortEndpoints(out)
}

// SortEndpoints returns endpoints, tagged already (see Interner.Endpoint),
// sorted by address.
func SortEndpoints(eps []*Endpoint) []TaggedEndpoint {
	out := make([]TaggedEndpoint, len(eps))
	for i, e := range eps {
		out[i] = TaggedEndpoint{e}
	}
	slices.SortFunc(out, func(a, b TaggedEndpoint) int { return strings.Compare(a.GetAddress(), b.GetAddress()) })
	return out
}
