package bench

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/xds"
)

// Client kinds, as reported.
const (
	kindGRPC    = "grpc"
	kindEnvoy   = "envoy"
	kindZtunnel = "ztunnel"
)

// byNameTypes are what gRPC and Envoy clients subscribe to, in the order
// a proxyless gRPC client first asks for them.
var byNameTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}

// client is a lightweight xDS client. It keeps no resources: it reads
// responses only as far as the harness needs (type, version, nonce, names,
// endpoint and workload addresses) without decoding them into messages,
// so that the harness process spends little next to the server.
type client struct {
	index    int32
	kind     string
	node     *core.Node
	services []int               // gRPC and Envoy: the services it calls
	names    map[string][]string // gRPC and Envoy: subscribed names, by type
	want     int                 // endpoints per service (gRPC, Envoy) or addresses (ztunnel)
	changes  *changes
	wire     *WireBytes

	conn *grpc.ClientConn

	streams   atomic.Int64 // streams opened
	converged atomic.Int64 // the stream on which it last had everything, 0 if none
	at        atomic.Int64 // when it converged then, in Unix nanoseconds
	responses atomic.Int64
	// partial counts EDS responses holding fewer endpoints of a service
	// than the clusterset has.
	partial atomic.Int64
}

// userAgents and clientFeatures are what grpc-go, Envoy and ztunnel send
// in their nodes (gRFC A27 makes every gRPC client send the feature).
var (
	userAgents     = map[string]string{kindGRPC: "gRPC Go", kindEnvoy: "envoy", kindZtunnel: "ztunnel"}
	clientFeatures = map[string][]string{kindGRPC: {"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"}}
)

func newClient(w world, index int, kind string, cs *changes, wire *WireBytes) *client {
	home := index % w.clusters
	l := locality(home)
	c := &client{
		index: int32(index), kind: kind, changes: cs, wire: wire,
		node: &core.Node{
			Id:       fmt.Sprintf("%s-%04d", kind, index),
			Locality: &core.Locality{Region: l.GetRegion(), Zone: l.GetZone()},
			// What each kind's real client says it is: the hub sends gRPC
			// clients no draining endpoints, so it keeps their views apart.
			UserAgentName:  userAgents[kind],
			ClientFeatures: clientFeatures[kind],
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
				xds.MetadataClusterID: structpb.NewStringValue(clusterID(home)),
				xds.MetadataNetwork:   structpb.NewStringValue(network),
			}},
		},
		names: map[string][]string{},
	}
	if kind == kindZtunnel {
		c.want = w.wantAddresses()
		return c
	}
	c.want = w.replicas * w.perService
	for k := range w.subscriptions {
		g := (index*7 + k*w.services/w.subscriptions) % w.services
		c.services = append(c.services, g)
		c.names[resourcev3.ListenerType] = append(c.names[resourcev3.ListenerType], listenerName(g))
		for _, typ := range byNameTypes[1:] {
			c.names[typ] = append(c.names[typ], edsName(g))
		}
	}
	return c
}

func (c *client) dial(addr string) error {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(fastReconnect),
		grpc.WithStatsHandler(c.wire),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(200<<20), grpc.ForceCodecV2(RawCodec{})))
	c.conn = conn
	return err
}

// run keeps a stream open until ctx ends, reopening it after errors (a
// hub restart).
func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.streams.Add(1)
		_ = c.stream(ctx)
		pause(ctx, 50*time.Millisecond)
	}
}

func (c *client) stream(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.streams.Load()
	var desc *grpc.StreamDesc
	var method string
	if c.kind == kindGRPC {
		desc, method = &discovery.AggregatedDiscoveryService_ServiceDesc.Streams[0], discovery.AggregatedDiscoveryService_StreamAggregatedResources_FullMethodName
	} else {
		desc, method = &discovery.AggregatedDiscoveryService_ServiceDesc.Streams[1], discovery.AggregatedDiscoveryService_DeltaAggregatedResources_FullMethodName
	}
	s, err := c.conn.NewStream(ctx, desc, method, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	for i, req := range c.initialRequests() {
		if i > 0 {
			clearNode(req)
		}
		if err := s.SendMsg(req); err != nil {
			return err
		}
	}
	st := newStreamState()
	for {
		r := &response{c: c}
		if err := s.RecvMsg(r); err != nil {
			return err
		}
		c.responses.Add(1)
		if err := s.SendMsg(c.ack(r)); err != nil {
			return err
		}
		st.apply(r)
		if r.lacks(c) {
			c.partial.Add(1)
		}
		if c.converged.Load() != stream && st.complete(c) {
			c.at.Store(time.Now().UnixNano())
			c.converged.Store(stream)
		}
	}
}

func clearNode(m proto.Message) {
	switch r := m.(type) {
	case *discovery.DiscoveryRequest:
		r.Node = nil
	case *discovery.DeltaDiscoveryRequest:
		r.Node = nil
	}
}

func (c *client) initialRequests() []proto.Message {
	var out []proto.Message
	switch c.kind {
	case kindGRPC:
		for _, typ := range byNameTypes {
			out = append(out, &discovery.DiscoveryRequest{Node: c.node, TypeUrl: typ, ResourceNames: c.names[typ]})
		}
	case kindEnvoy:
		for _, typ := range byNameTypes {
			out = append(out, &discovery.DeltaDiscoveryRequest{Node: c.node, TypeUrl: typ, ResourceNamesSubscribe: c.names[typ]})
		}
	case kindZtunnel:
		for _, typ := range []string{xds.AddressType, xds.AuthorizationType} {
			out = append(out, &discovery.DeltaDiscoveryRequest{Node: c.node, TypeUrl: typ})
		}
	}
	return out
}

func (c *client) ack(r *response) proto.Message {
	if c.kind == kindGRPC {
		return &discovery.DiscoveryRequest{TypeUrl: r.typeURL, VersionInfo: r.version, ResponseNonce: r.nonce, ResourceNames: c.names[r.typeURL]}
	}
	return &discovery.DeltaDiscoveryRequest{TypeUrl: r.typeURL, ResponseNonce: r.nonce}
}

// streamState is what a client knows on one stream: enough to tell when
// it has everything.
type streamState struct {
	types     map[string]bool
	endpoints map[string]int      // gRPC, Envoy: endpoints per EDS resource
	addresses map[string]struct{} // ztunnel: Address names, until complete
}

func newStreamState() *streamState {
	return &streamState{types: map[string]bool{}, endpoints: map[string]int{}, addresses: map[string]struct{}{}}
}

func (st *streamState) apply(r *response) {
	st.types[r.typeURL] = true
	for name, n := range r.endpoints {
		st.endpoints[name] = n
	}
	if st.addresses != nil {
		if len(st.addresses) == 0 {
			st.addresses = make(map[string]struct{}, len(r.names))
		}
		for _, name := range r.names {
			st.addresses[name] = struct{}{}
		}
		for _, name := range r.removed {
			delete(st.addresses, name)
		}
	}
}

// lacks reports whether an EDS response holds fewer endpoints of a
// service than the clusterset has.
func (r *response) lacks(c *client) bool {
	for _, n := range r.endpoints {
		if n < c.want {
			return true
		}
	}
	return false
}

// complete reports whether the client has the clusterset's full state.
func (st *streamState) complete(c *client) bool {
	if c.kind == kindZtunnel {
		if !st.types[xds.AddressType] || !st.types[xds.AuthorizationType] || len(st.addresses) < c.want {
			return false
		}
		st.addresses = nil // no need to keep the names
		return true
	}
	for _, typ := range byNameTypes {
		if !st.types[typ] {
			return false
		}
	}
	for _, name := range c.names[resourcev3.EndpointType] {
		if st.endpoints[name] != c.want {
			return false
		}
	}
	return true
}

// response is what a client reads of a DiscoveryResponse or a
// DeltaDiscoveryResponse. Parsing records the changes it shows.
type response struct {
	c                       *client
	typeURL, version, nonce string
	endpoints               map[string]int // EDS: addresses per resource
	names, removed          []string       // delta: resource names (kept for ztunnels only)
}

// Field numbers the clients read.
const (
	// DiscoveryResponse and DeltaDiscoveryResponse.
	respVersion   protowire.Number = 1
	respResources protowire.Number = 2
	respTypeURL   protowire.Number = 4
	respNonce     protowire.Number = 5
	respRemoved   protowire.Number = 6 // delta only
	// Resource (delta), Any.
	resourceName  protowire.Number = 3
	resourceValue protowire.Number = 2 // Resource.resource, and Any.value
)

// Paths inside a ClusterLoadAssignment: its cluster_name, and endpoints →
// lb_endpoints → endpoint → address → socket_address → address.
var (
	claClusterName = []protowire.Number{1}
	claAddress     = []protowire.Number{2, 2, 1, 1, 1, 2}
	// Address → workload → addresses (raw IP bytes).
	workloadAddresses = []protowire.Number{1, 3}
)

// Parse reads an encoded response (for RawCodec). The type URL follows
// the resources in the encoding, so a first pass reads the fields that
// are not resources, and counts the resources, before a second reads them.
func (r *response) Parse(b []byte) error {
	now := time.Now()
	delta := r.c.kind != kindGRPC
	resources := 0
	err := EachField(b, func(num protowire.Number, v []byte) {
		switch num {
		case respVersion:
			r.version = string(v)
		case respResources:
			resources++
		case respTypeURL:
			r.typeURL = string(v)
		case respNonce:
			r.nonce = string(v)
		case respRemoved:
			if r.c.kind == kindZtunnel {
				r.removed = append(r.removed, string(v))
			}
		}
	})
	if err != nil {
		return err
	}
	if r.c.kind == kindZtunnel {
		r.names = make([]string, 0, resources)
	}
	return EachField(b, func(num protowire.Number, res []byte) {
		if num != respResources {
			return
		}
		value := res
		if delta {
			value = nil
			_ = EachField(res, func(num protowire.Number, v []byte) {
				switch num {
				case resourceName:
					if r.c.kind == kindZtunnel {
						r.names = append(r.names, string(v))
					}
				case resourceValue:
					value = v
				}
			})
		}
		value = First(value, []protowire.Number{resourceValue}) // Any.value
		switch r.typeURL {
		case resourcev3.EndpointType:
			if r.endpoints == nil {
				r.endpoints = map[string]int{}
			}
			n := 0
			EachAt(value, claAddress, func(addr []byte) {
				n++
				r.c.changes.seen(string(addr), r.c.index, now)
			})
			r.endpoints[string(First(value, claClusterName))] = n
		case xds.AddressType:
			EachAt(value, workloadAddresses, func(ip []byte) {
				if a, ok := netip.AddrFromSlice(ip); ok {
					r.c.changes.seen(a.String(), r.c.index, now)
				}
			})
		}
	})
}

// EachField calls fn with the number and value of every length-delimited
// field of an encoded message.
func EachField(b []byte, fn func(protowire.Number, []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		fn(num, v)
	}
	return nil
}

// EachAt calls fn with every length-delimited value at path (field
// numbers, outermost first) in an encoded message. Clients read responses
// with it instead of decoding them, so that they cost little next to the
// server under test.
func EachAt(b []byte, path []protowire.Number, fn func([]byte)) {
	_ = EachField(b, func(num protowire.Number, v []byte) {
		if num != path[0] {
			return
		}
		if len(path) == 1 {
			fn(v)
			return
		}
		EachAt(v, path[1:], fn)
	})
}

// First returns the first value at path, nil if none.
func First(b []byte, path []protowire.Number) []byte {
	var out []byte
	EachAt(b, path, func(v []byte) {
		if out == nil {
			out = v
		}
	})
	return out
}

// RawCodec encodes requests as protobuf and hands each response, undecoded,
// to the Parse method of the value it is received into. Parse must not
// keep the bytes it is given: they are reused once it returns.
type RawCodec struct{}

var _ encoding.CodecV2 = RawCodec{}

// Name is grpc-go's protobuf codec's.
func (RawCodec) Name() string { return "proto" }

// Marshal encodes a request.
func (RawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("cannot encode %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal hands data to v's Parse. A response that arrived in pieces is
// copied into a pooled buffer: a ztunnel's first response is tens of
// megabytes, and a new buffer for each would cost the harness more (page
// faults, the collector) than the hub spends building it.
func (RawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(interface{ Parse([]byte) error })
	if !ok {
		return fmt.Errorf("cannot decode into %T", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return p.Parse(buf.ReadOnlyData())
}

// WireBytes is a grpc-go stats handler that counts the bytes the
// connections it is given receive, on the wire (the benchmarks in e2e use
// it too).
type WireBytes struct{ n atomic.Int64 }

var _ stats.Handler = (*WireBytes)(nil)

// Load returns the bytes received so far.
func (h *WireBytes) Load() int64 { return h.n.Load() }

// TagRPC implements stats.Handler.
func (h *WireBytes) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC implements stats.Handler.
func (h *WireBytes) HandleRPC(_ context.Context, st stats.RPCStats) {
	if in, ok := st.(*stats.InPayload); ok {
		h.n.Add(int64(in.WireLength))
	}
}

// TagConn implements stats.Handler.
func (h *WireBytes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (h *WireBytes) HandleConn(context.Context, stats.ConnStats) {}
