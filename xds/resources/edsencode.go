package resources

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// EncodeLoadAssignment returns the EDS resource (a ClusterLoadAssignment)
// of one (hostname, port) of s for proxies with the given view, encoded.
// gateways are the clusterset's east-west gateways.
//
// Endpoints on the view's network are sent as they are; an empty network is
// the default network and equals only itself. Endpoints on another network
// are replaced by that network's gateways (see addGateways), or dropped when
// it has none. Localities get priorities by proximity to the view's
// locality: same zone (and subzone, when the view has one) first, then same
// region, then the rest; a view without a region prefers nothing. Stale
// clusters' endpoints come after every live one's, ordered the same way
// among themselves. The result satisfies every invariant in the package doc.
//
// It writes the bytes directly, without building messages: a hub
// re-encodes the assignments of a changed service for each way proxies
// see it, and messages built and then marshalled would be two thirds of
// what a push allocates (and so of its garbage collections). The bytes are
// those of proto's deterministic marshalling of the ClusterLoadAssignment
// that Assignment describes, except that each lb_endpoint's metadata
// (field 3) comes last: it is encoded once per (cluster, network) and
// appended to each lb_endpoint. Resource versions are hashes of these
// bytes, so they must not change from one hub version to the next.
func EncodeLoadAssignment(s *clusterset.ServiceView, hostname string, port *federationpb.ServicePort, view View, gateways *clusterset.Gateways) []byte {
	return assign(s, port, view, gateways).encode(ClusterName(port.GetPort(), hostname))
}

// Field numbers of envoy.config.endpoint.v3 and envoy.config.core.v3
// messages, as encode writes them.
const (
	claClusterName = 1 // ClusterLoadAssignment
	claEndpoints   = 2

	lleLocality = 1 // LocalityLbEndpoints
	lleLbEps    = 2
	lleWeight   = 3
	llePriority = 5

	localityRegion  = 1 // Locality
	localityZone    = 2
	localitySubZone = 3

	lbEndpoint = 1 // LbEndpoint
	lbHealth   = 2
	lbMetadata = 3
	lbWeight   = 4

	endpointAddress = 1 // Endpoint
	addressSocket   = 1 // Address
	socketAddress   = 2 // SocketAddress (protocol 1 is TCP, the default: not written)
	socketPort      = 3

	wrapperValue = 1 // UInt32Value

	metadataFilter = 1 // Metadata.filter_metadata, a map<string, Struct>
	structFields   = 1 // Struct.fields, a map<string, Value>
	mapKey         = 1 // a map entry
	mapValue       = 2
	valueString    = 3 // Value.string_value
)

func (b *builder) encode(clusterName string) []byte {
	head := protowire.SizeTag(claClusterName) + protowire.SizeBytes(len(clusterName))
	if len(b.groups) == 0 {
		return protowire.AppendString(protowire.AppendTag(make([]byte, 0, head), claClusterName, protowire.BytesType), clusterName)
	}
	scale := b.scale()
	groups, priority := b.ordered()
	metas := map[metaKey][]byte{}

	// Sizes first: every message is length-prefixed, and the output is
	// allocated once.
	type groupSize struct {
		body, locality int
		sum            uint64
		weights, sizes []int
	}
	gs := make([]groupSize, len(groups))
	total := head
	for gi, g := range groups {
		z := &gs[gi]
		z.weights, z.sizes = make([]int, len(g.entries)), make([]int, len(g.entries))
		for i, e := range g.entries {
			w := e.weight(scale)
			z.sum += w
			z.weights[i] = int(w)
			if _, ok := metas[e.meta]; !ok {
				metas[e.meta] = encodedMetadata(e.meta)
			}
			z.sizes[i] = lbEndpointSize(e, uint32(w), metas[e.meta])
			z.body += protowire.SizeTag(lleLbEps) + protowire.SizeBytes(z.sizes[i])
		}
		z.locality = localitySize(g.locality)
		z.body += protowire.SizeTag(lleLocality) + protowire.SizeBytes(z.locality)
		z.body += protowire.SizeTag(lleWeight) + protowire.SizeBytes(wrapperSize(uint32(z.sum)))
		if p := priority[g.rank]; p != 0 {
			z.body += protowire.SizeTag(llePriority) + protowire.SizeVarint(uint64(p))
		}
		total += protowire.SizeTag(claEndpoints) + protowire.SizeBytes(z.body)
	}

	out := make([]byte, 0, total)
	out = protowire.AppendTag(out, claClusterName, protowire.BytesType)
	out = protowire.AppendString(out, clusterName)
	for gi, g := range groups {
		z := &gs[gi]
		out = protowire.AppendTag(out, claEndpoints, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(z.body))
		out = protowire.AppendTag(out, lleLocality, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(z.locality))
		out = appendStringField(out, localityRegion, g.locality.Region)
		out = appendStringField(out, localityZone, g.locality.Zone)
		out = appendStringField(out, localitySubZone, g.locality.Subzone)
		for i, e := range g.entries {
			out = protowire.AppendTag(out, lleLbEps, protowire.BytesType)
			out = protowire.AppendVarint(out, uint64(z.sizes[i]))
			out = appendLbEndpoint(out, e, uint32(z.weights[i]), metas[e.meta])
		}
		out = protowire.AppendTag(out, lleWeight, protowire.BytesType)
		out = appendWrapper(out, uint32(z.sum))
		if p := priority[g.rank]; p != 0 {
			out = protowire.AppendTag(out, llePriority, protowire.VarintType)
			out = protowire.AppendVarint(out, uint64(p))
		}
	}
	return out
}

// encodedMetadata is an lb_endpoint's metadata field (tag included):
// {MetadataNamespace: {cluster, network}}, map entries sorted by key as
// deterministic marshalling writes them.
func encodedMetadata(k metaKey) []byte {
	var fields []byte
	for _, f := range [...]struct{ key, value string }{{"cluster", string(k.cluster)}, {"network", string(k.network)}} {
		// A oneof member (Value.string_value) is written even when empty.
		value := protowire.AppendString(protowire.AppendTag(nil, valueString, protowire.BytesType), f.value)
		fields = appendMapEntry(fields, structFields, f.key, value)
	}
	meta := appendMapEntry(nil, metadataFilter, MetadataNamespace, fields)
	return protowire.AppendBytes(protowire.AppendTag(nil, lbMetadata, protowire.BytesType), meta)
}

// appendMapEntry appends an entry of map field num whose values are
// messages: its key and value are written even when empty, as protobuf-go
// writes map entries.
func appendMapEntry(out []byte, num protowire.Number, key string, value []byte) []byte {
	n := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(mapValue) + protowire.SizeBytes(len(value))
	out = protowire.AppendTag(out, num, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(n))
	out = protowire.AppendTag(out, mapKey, protowire.BytesType)
	out = protowire.AppendString(out, key)
	out = protowire.AppendTag(out, mapValue, protowire.BytesType)
	return protowire.AppendBytes(out, value)
}

func socketSize(e entry) int {
	n := protowire.SizeTag(socketAddress) + protowire.SizeBytes(len(e.address))
	if e.port != 0 {
		n += protowire.SizeTag(socketPort) + protowire.SizeVarint(uint64(e.port))
	}
	return n
}

// endpointSizes returns the sizes of an entry's SocketAddress, Address and
// Endpoint messages.
func endpointSizes(e entry) (socket, address, endpoint int) {
	socket = socketSize(e)
	address = protowire.SizeTag(addressSocket) + protowire.SizeBytes(socket)
	endpoint = protowire.SizeTag(endpointAddress) + protowire.SizeBytes(address)
	return socket, address, endpoint
}

func lbEndpointSize(e entry, weight uint32, meta []byte) int {
	_, _, endpoint := endpointSizes(e)
	n := protowire.SizeTag(lbEndpoint) + protowire.SizeBytes(endpoint)
	if e.health != 0 {
		n += protowire.SizeTag(lbHealth) + protowire.SizeVarint(uint64(e.health))
	}
	n += protowire.SizeTag(lbWeight) + protowire.SizeBytes(wrapperSize(weight))
	return n + len(meta)
}

// appendLbEndpoint writes the fields in the order protobuf-go does: the
// plain ones by number, then the oneof (host_identifier), then unknown
// fields (the pre-encoded metadata).
func appendLbEndpoint(out []byte, e entry, weight uint32, meta []byte) []byte {
	if e.health != 0 {
		out = protowire.AppendTag(out, lbHealth, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(e.health))
	}
	out = protowire.AppendTag(out, lbWeight, protowire.BytesType)
	out = appendWrapper(out, weight)
	socket, address, endpoint := endpointSizes(e)
	out = protowire.AppendTag(out, lbEndpoint, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(endpoint))
	out = protowire.AppendTag(out, endpointAddress, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(address))
	out = protowire.AppendTag(out, addressSocket, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(socket))
	out = protowire.AppendTag(out, socketAddress, protowire.BytesType)
	out = protowire.AppendString(out, e.address)
	if e.port != 0 {
		out = protowire.AppendTag(out, socketPort, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(e.port))
	}
	return append(out, meta...)
}

func localitySize(l Locality) int {
	n := 0
	for _, s := range []string{l.Region, l.Zone, l.Subzone} {
		if s != "" {
			n += protowire.SizeTag(localityRegion) + protowire.SizeBytes(len(s))
		}
	}
	return n
}

func wrapperSize(v uint32) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(wrapperValue) + protowire.SizeVarint(uint64(v))
}

// appendWrapper appends a length-prefixed UInt32Value.
func appendWrapper(out []byte, v uint32) []byte {
	out = protowire.AppendVarint(out, uint64(wrapperSize(v)))
	if v != 0 {
		out = protowire.AppendTag(out, wrapperValue, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(v))
	}
	return out
}

func appendStringField(out []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return out
	}
	out = protowire.AppendTag(out, num, protowire.BytesType)
	return protowire.AppendString(out, s)
}
