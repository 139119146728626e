package federation

import (
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// chunkOverhead leaves room for an update's own fields and the envelope.
const chunkOverhead = 1024

// Chunk splits an update into chunks whose encoding stays under maxBytes:
// every chunk carries the update's version, nonce and full flag, the first
// carries its cluster and observed time, and all but the last have
// more=true. An update that fits is returned as is. maxBytes <= 0 means no
// limit.
func Chunk(u *federationpb.ShardUpdate, maxBytes int) []*federationpb.ShardUpdate {
	if maxBytes <= 0 || proto.Size(u) <= maxBytes-chunkOverhead {
		u.More = false
		return []*federationpb.ShardUpdate{u}
	}
	budget := max(maxBytes-chunkOverhead, 1)
	var out []*federationpb.ShardUpdate
	cur := &federationpb.ShardUpdate{
		Version: u.GetVersion(), Nonce: u.GetNonce(), Full: u.GetFull(),
		Cluster: u.GetCluster(), ObservedTime: u.GetObservedTime(),
	}
	size := proto.Size(cur)
	// add appends one object with fn when it fits, starting a new chunk
	// first when it does not.
	add := func(n int, fn func(*federationpb.ShardUpdate)) {
		n += 4 // tag and length prefix
		if size+n > budget && size > 0 {
			out = append(out, cur)
			cur = &federationpb.ShardUpdate{Version: u.GetVersion(), Nonce: u.GetNonce(), Full: u.GetFull()}
			size = 0
		}
		fn(cur)
		size += n
	}
	for _, s := range u.GetServices() {
		add(proto.Size(s), func(c *federationpb.ShardUpdate) { c.Services = append(c.Services, s) })
	}
	for _, e := range u.GetEndpoints() {
		add(proto.Size(e), func(c *federationpb.ShardUpdate) { c.Endpoints = append(c.Endpoints, e) })
	}
	for _, w := range u.GetWorkloads() {
		add(proto.Size(w), func(c *federationpb.ShardUpdate) { c.Workloads = append(c.Workloads, w) })
	}
	for _, k := range u.GetRemovedServices() {
		add(len(k), func(c *federationpb.ShardUpdate) { c.RemovedServices = append(c.RemovedServices, k) })
	}
	for _, k := range u.GetRemovedEndpoints() {
		add(len(k), func(c *federationpb.ShardUpdate) { c.RemovedEndpoints = append(c.RemovedEndpoints, k) })
	}
	for _, k := range u.GetRemovedWorkloads() {
		add(len(k), func(c *federationpb.ShardUpdate) { c.RemovedWorkloads = append(c.RemovedWorkloads, k) })
	}
	out = append(out, cur)
	for _, c := range out[:len(out)-1] {
		c.More = true
	}
	return out
}
