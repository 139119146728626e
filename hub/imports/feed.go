// Package imports tells each importing spoke what its cluster should hold
// of the clusterset: one MCS ServiceImport per import (a service some
// cluster exports with a ServiceExport), with every exporting cluster's
// endpoints as that cluster reaches them, and the conflicts and readiness
// of the import's exports.
//
// A [Feed] follows the registry's snapshots for one spoke stream. It sends
// the full set once the hub serves (after its warm-up: a restarted hub
// never tells a spoke to delete what clusters still to reconnect export),
// then, whenever snapshots change imports, those imports whole. What
// changed is read from the snapshots' change lists; a feed keeps no copy
// of what it sent but the snapshot it sent last.
//
// Invariants:
//   - The content of an import is a function of the snapshot and the
//     receiving cluster's network: every replica sends the same.
//   - An endpoint on the receiver's network is sent as it is. One on
//     another network is unreachable by address: a ClusterSetIP import
//     gets that network's east-west gateways instead (with the gateway's
//     port, for a dataplane that captures the ClusterSetIP and tunnels);
//     a headless import gets nothing for it, since its clients dial the
//     addresses they resolve, and a gateway address would take them to the
//     gateway, not to the pod they asked for.
//   - A set is split into chunks below the stream's message bound; one
//     import too large for a chunk is split into parts by its sources and
//     endpoints.
//   - A spoke that serves remote views gets, besides, each source as its
//     own cluster has it (every endpoint as it is, the ClusterIPs and
//     ports), and the members' clusters whenever they changed: what it
//     needs to show istiod each member as that member's API would.
package imports

import (
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
)

// Feed is one spoke stream's imports.
type Feed struct {
	cluster federation.ClusterID
	want    syncproto.ImportsWanted
	current func() clusterset.Snapshot
	// serving is closed once the hub serves (its warm-up ended).
	serving <-chan struct{}
	// sent is the snapshot last sent (nil before the full set); watch is
	// the one whose successor Next waits for.
	sent, watch clusterset.Snapshot
	version     uint64
	// clusters are the members' clusters last sent to a spoke that
	// serves remote views.
	clusters []*federationpb.Cluster
}

var _ syncproto.ImportsFeed = (*Feed)(nil)

// NewFeed returns the feed of cluster's stream, reading snapshots from
// current, sending nothing before serving is closed. A mesh feed sends
// every federated service, not only the MCS imports.
func NewFeed(cluster federation.ClusterID, want syncproto.ImportsWanted, current func() clusterset.Snapshot, serving <-chan struct{}) *Feed {
	return &Feed{cluster: cluster, want: want, current: current, serving: serving}
}

// wants reports whether the feed sends a service.
func (f *Feed) wants(v *clusterset.ServiceView) bool { return f.want.Mesh || v.IsImport() }

// Ready has a value when Next may have a set to send.
func (f *Feed) Ready() <-chan struct{} {
	if f.watch != nil {
		return f.watch.Done()
	}
	return f.serving
}

// Next returns the next set in chunks below maxBytes, or nil.
func (f *Feed) Next(maxBytes int) []*federationpb.Imports {
	select {
	case <-f.serving:
	default:
		return nil
	}
	full := f.sent == nil
	var cur clusterset.Snapshot
	var changes clusterset.Changes
	if full {
		cur = f.current()
	} else {
		cur, changes = clusterset.Newest(f.sent)
	}
	f.watch = cur
	me, ok := cur.Cluster(f.cluster)
	if !ok {
		return nil // the receiver's network is not known before its shard
	}
	b := Builder{Network: me.Network, Gateways: cur.Gateways(), ClusterView: f.want.RemoteViews}
	if f.want.Mesh {
		b.Workload = cur.Workload
	}
	var clusters []*federationpb.Cluster
	if f.want.RemoteViews && (full || changes.Clusters) {
		if now := members(cur); full || !slices.EqualFunc(now, f.clusters, (*federationpb.Cluster).EqualVT) {
			clusters, f.clusters = now, now
		}
	}
	var imports []*federationpb.Import
	var removed []string
	if full {
		for _, v := range cur.Services() {
			if f.wants(v) {
				imports = append(imports, b.Build(v, cur.Import(v.Key)))
			}
		}
	} else {
		keys := changes.Services // Fold's own slice
		slices.Sort(keys)
		keys = slices.Compact(keys)
		if changes.Clusters && f.reachChanged(cur, me.Network) {
			// The gateways, or the receiver's network, changed: every
			// import may reach its sources otherwise, and each is resent.
			// (A cluster's own network or lease changes its services,
			// which are among the changes.)
			keys = nil
			for _, v := range f.sent.Services() {
				keys = append(keys, v.Key)
			}
			for _, v := range cur.Services() {
				keys = append(keys, v.Key)
			}
			slices.Sort(keys)
			keys = slices.Compact(keys)
		}
		for _, k := range keys {
			v, ok := cur.Service(k)
			switch {
			case ok && f.wants(v):
				imports = append(imports, b.Build(v, cur.Import(k)))
			case f.wasSent(f.sent, k):
				removed = append(removed, k)
			}
		}
		if len(imports) == 0 && len(removed) == 0 && clusters == nil {
			f.sent = cur
			return nil
		}
	}
	f.sent = cur
	f.version++
	chunks := Chunk(f.version, full, imports, removed, maxBytes)
	for _, c := range chunks {
		c.Network = string(me.Network)
	}
	chunks[0].Clusters = clusters
	return chunks
}

// members returns the clusters a remote view shows: every member whose
// lease is not withdrawn (a withdrawn member's view goes), sorted by ID.
func members(s clusterset.Snapshot) []*federationpb.Cluster {
	var out []*federationpb.Cluster
	for _, c := range s.Clusters() {
		if c.State == clusterset.Withdrawn {
			continue
		}
		out = append(out, &federationpb.Cluster{Id: string(c.ID), Network: string(c.Network), TrustDomain: c.TrustDomain, Gateways: c.Gateways})
	}
	slices.SortFunc(out, func(a, b *federationpb.Cluster) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out
}

// reachChanged reports whether what decides how the receiver reaches the
// sources changed since the last set: the gateways (kept by a snapshot
// while equal) or the receiver's network.
func (f *Feed) reachChanged(cur clusterset.Snapshot, network federation.NetworkID) bool {
	was, ok := f.sent.Cluster(f.cluster)
	return !ok || was.Network != network || !cur.Gateways().Equal(f.sent.Gateways())
}

// wasSent reports whether the feed sent a service in snapshot s.
func (f *Feed) wasSent(s clusterset.Snapshot, key string) bool {
	v, ok := s.Service(key)
	return ok && f.wants(v)
}

// Builder builds imports for one receiving cluster.
type Builder struct {
	// Network is the receiving cluster's.
	Network federation.NetworkID
	// Gateways are the clusterset's east-west gateways.
	Gateways *clusterset.Gateways
	// Workload, when set, finds the workloads behind endpoints (by their
	// clusterset key), which a mesh feed sends with each source.
	Workload func(key string) (clusterset.TaggedWorkload, bool)
	// ClusterView adds to each source the service as its own cluster has
	// it, for a spoke that serves remote views.
	ClusterView bool
}

// Build returns the import of v, whose decisions are imp, as the receiving
// cluster reaches it.
func (b Builder) Build(v *clusterset.ServiceView, imp clusterset.Import) *federationpb.Import {
	o := v.Oldest
	im := &federationpb.Import{
		Namespace:                     v.Namespace,
		Name:                          v.Name,
		Type:                          federationpb.ImportType_IMPORT_TYPE_CLUSTER_SET_IP,
		SessionAffinity:               o.GetSessionAffinity(),
		SessionAffinityTimeoutSeconds: o.GetSessionAffinityTimeoutSeconds(),
		InternalTrafficPolicy:         o.GetInternalTrafficPolicy(),
		TrafficDistribution:           o.GetTrafficDistribution(),
		Labels:                        o.GetExport().GetLabels(),
		Annotations:                   o.GetExport().GetAnnotations(),
		IpError:                       imp.IPError,
		Mcs:                           v.IsImport(),
	}
	headless := v.Headless()
	if headless {
		im.Type = federationpb.ImportType_IMPORT_TYPE_HEADLESS
	} else {
		fams := v.ImportFamilies()
		for i, a := range imp.ClustersetIPs {
			if a.IsValid() && i < len(fams) {
				im.Ips = append(im.Ips, a.String())
				im.IpFamilies = append(im.IpFamilies, fams[i])
			}
		}
	}
	for _, p := range v.Ports {
		im.Ports = append(im.Ports, &federationpb.ServicePort{Name: p.GetName(), Protocol: p.GetProtocol(), AppProtocol: p.GetAppProtocol(), Port: p.GetPort()})
	}
	for _, c := range v.Conflicts {
		im.Conflicts = append(im.Conflicts, &federationpb.ImportConflict{Reason: c.Reason, Message: c.Message})
	}
	for _, id := range imp.Ready {
		im.Ready = append(im.Ready, string(id))
	}
	for _, c := range v.Clusters {
		im.Clusters = append(im.Clusters, string(c.Cluster))
		im.Sources = append(im.Sources, b.source(c, headless, im.Ports))
	}
	return im
}

// source returns one exporting cluster's endpoints as the receiver's
// network reaches them: those on it as they are; for a ClusterSetIP
// import, those on another network behind that network's mTLS gateways,
// ready or serving as clusterset.Behind says what the gateways stand for.
func (b Builder) source(c clusterset.ClusterService, headless bool, ports []*federationpb.ServicePort) *federationpb.ImportSource {
	src := &federationpb.ImportSource{Cluster: string(c.Cluster), Network: string(c.Network)}
	if b.ClusterView {
		src.ClusterIps, src.ClusterPorts = c.Service.GetClusterIps(), c.Service.GetPorts()
	}
	var remote map[federation.NetworkID]*clusterset.Behind
	for _, e := range c.Endpoints {
		here := e.Network == b.Network
		if here || b.ClusterView {
			pb := e.Proto()
			if here {
				src.Endpoints = append(src.Endpoints, pb)
			}
			if b.ClusterView {
				src.ClusterEndpoints = append(src.ClusterEndpoints, pb)
			}
			if ref, _ := e.Workload(); b.Workload != nil && ref.UID != "" {
				if w, ok := b.Workload(clusterset.WorkloadKey(c.Cluster, ref.UID)); ok {
					src.Workloads = append(src.Workloads, w.Proto())
				}
			}
		}
		if here {
			continue
		}
		if headless || !clusterset.ThroughGateway(e.Endpoint) {
			continue
		}
		if remote == nil {
			remote = map[federation.NetworkID]*clusterset.Behind{}
		}
		r, ok := remote[e.Network]
		if !ok {
			r = &clusterset.Behind{}
			remote[e.Network] = r
		}
		r.Add(e.Endpoint, c.Stale, 0)
	}
	for _, n := range slices.Sorted(maps.Keys(remote)) {
		// A network none of whose endpoints is served still lists its
		// gateways, neither ready nor serving, as an EndpointSlice lists
		// endpoints that are not ready (EDS sends no such gateway).
		st := remote[n].Stand()
		for _, g := range b.Gateways.MTLS(n) {
			ep := &federationpb.Endpoint{Address: g.GetAddress(), Ready: st.Serving == clusterset.Ready, Serving: st.Serving != clusterset.NotServed, Network: string(n)}
			for _, p := range ports {
				ep.Ports = append(ep.Ports, &federationpb.EndpointPort{Name: p.GetName(), Protocol: p.GetProtocol(), AppProtocol: p.GetAppProtocol(), Port: g.GetPort()})
			}
			src.Endpoints = append(src.Endpoints, ep)
			src.ViaGateway = true
		}
	}
	return src
}

// chunkOverhead is what a chunk's envelope and framing may add to its
// imports' sizes.
const chunkOverhead = 1024

// Chunk splits a set into chunks below maxBytes.
func Chunk(version uint64, full bool, imports []*federationpb.Import, removed []string, maxBytes int) []*federationpb.Imports {
	budget := max(maxBytes-chunkOverhead, 1024)
	var out []*federationpb.Imports
	cur := &federationpb.Imports{Version: version, Full: full}
	size := 0
	// room starts a new chunk when n more bytes do not fit in this one.
	room := func(n int) {
		if size > 0 && size+n > budget {
			cur.More = true
			out = append(out, cur)
			cur, size = &federationpb.Imports{Version: version, Full: full}, 0
		}
		size += n
	}
	for _, im := range imports {
		parts := []*federationpb.Import{im}
		if proto.Size(im)+8 > budget {
			parts = split(im, budget)
		}
		for _, part := range parts {
			room(proto.Size(part) + 8)
			cur.Imports = append(cur.Imports, part)
		}
	}
	for _, k := range removed {
		room(len(k) + 8)
		cur.Removed = append(cur.Removed, k)
	}
	return append(out, cur)
}

// split cuts an import too large for one chunk into parts: the first
// carries every field but the sources, the others each carry one source's
// fields and as many of its endpoints and workloads as fit (a source may
// be cut into several parts, which add up). im is borrowed for a moment,
// not kept.
func split(im *federationpb.Import, budget int) []*federationpb.Import {
	sources := im.Sources
	im.Sources = nil
	head := proto.Clone(im).(*federationpb.Import)
	im.Sources = sources
	parts := []*federationpb.Import{head}
	for _, src := range im.GetSources() {
		part := &federationpb.ImportSource{
			Cluster: src.GetCluster(), ViaGateway: src.GetViaGateway(), Network: src.GetNetwork(),
			ClusterIps: src.GetClusterIps(), ClusterPorts: src.GetClusterPorts(),
		}
		size, items := proto.Size(part)+64, 0
		// fit starts a new part when an item of n bytes does not fit.
		fit := func(n int) {
			if items > 0 && size+n > budget {
				parts = append(parts, &federationpb.Import{Namespace: im.GetNamespace(), Name: im.GetName(), Sources: []*federationpb.ImportSource{part}})
				part = &federationpb.ImportSource{Cluster: src.GetCluster(), ViaGateway: src.GetViaGateway()}
				size, items = proto.Size(part)+64, 0
			}
			size += n
			items++
		}
		for _, e := range src.GetEndpoints() {
			fit(proto.Size(e) + 8)
			part.Endpoints = append(part.Endpoints, e)
		}
		for _, e := range src.GetClusterEndpoints() {
			fit(proto.Size(e) + 8)
			part.ClusterEndpoints = append(part.ClusterEndpoints, e)
		}
		for _, w := range src.GetWorkloads() {
			fit(proto.Size(w) + 8)
			part.Workloads = append(part.Workloads, w)
		}
		parts = append(parts, &federationpb.Import{Namespace: im.GetNamespace(), Name: im.GetName(), Sources: []*federationpb.ImportSource{part}})
	}
	return parts
}
