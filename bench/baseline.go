package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/adspb"
	"github.com/meshfed/meshfed/xds"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/resources/reference"
)

// RunBaselineHub runs the baseline the harness compares meshfed with: the
// hub's own ingest and registry (so spokes see no difference), and for
// xDS what a team writes first: go-control-plane's SnapshotCache, with one
// snapshot per node, every node's rebuilt and set on each registry change.
// It serves CDS, LDS, RDS and EDS (SotW and delta); not the workload API.
// cfg.XDSAddr is the baseline's; the hub's own xDS stays off.
func RunBaselineHub(ctx context.Context, cfg hub.Config, log *slog.Logger) error {
	xdsAddr := cfg.XDSAddr
	cfg.XDSAddr = ""
	h, err := hub.New(cfg, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", xdsAddr)
	if err != nil {
		return fmt.Errorf("baseline xDS listener: %w", err)
	}
	b := NewBaseline()
	g := grpc.NewServer(grpc.MaxSendMsgSize(cfg.XDSMaxMessageBytes))
	b.Register(ctx, g)
	errc := make(chan error, 3)
	go func() { errc <- h.Run(ctx) }()
	go func() { errc <- g.Serve(lis) }()
	go func() { errc <- b.Run(ctx, h.Registry().Current()) }()
	err = <-errc
	g.Stop()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Baseline is the xDS side of the baseline: go-control-plane's
// SnapshotCache with a snapshot per node it has seen (the node and the
// names it asks for learned from the server's callbacks), every node's
// rebuilt and set on each registry change. The e2e fan-out benchmark uses
// it in process.
type Baseline struct {
	cache cache.SnapshotCache

	mu      sync.Mutex
	nodes   map[string]*baselineNode // by node ID
	streams map[streamID]string      // stream → node ID
	kick    chan struct{}            // has a value when a node or subscription is new
}

// streamID names a stream: go-control-plane numbers SotW and delta
// streams separately.
type streamID struct {
	id    int64
	delta bool
}

type baselineNode struct {
	node *core.Node
	ads  *adspb.Node // node as the hub reads it
	// Hostnames it asked for a resource of, in any type.
	hosts map[string]bool
}

// NewBaseline returns a baseline with no nodes yet.
func NewBaseline() *Baseline {
	return &Baseline{
		cache: cache.NewSnapshotCache(false, cache.IDHash{}, nil),
		nodes: map[string]*baselineNode{}, streams: map[streamID]string{}, kick: make(chan struct{}, 1),
	}
}

// Register serves the baseline's ADS on g, until ctx ends.
func (b *Baseline) Register(ctx context.Context, g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, gcpserver.NewServer(ctx, b.cache, b.callbacks()))
}

func (b *Baseline) callbacks() gcpserver.CallbackFuncs {
	return gcpserver.CallbackFuncs{
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			b.learn(streamID{id, false}, r.GetNode(), r.GetResourceNames())
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			b.learn(streamID{id, true}, r.GetNode(), r.GetResourceNamesSubscribe())
			return nil
		},
	}
}

// learn records a stream's node and the hostnames it asks for, and asks
// for a rebuild when either is new.
func (b *Baseline) learn(stream streamID, node *core.Node, names []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id, ok := b.streams[stream]
	if !ok {
		if node == nil {
			return
		}
		id = node.GetId()
		b.streams[stream] = id
	}
	n := b.nodes[id]
	changed := false
	if n == nil {
		n = &baselineNode{node: node, ads: adsNode(node), hosts: map[string]bool{}}
		b.nodes[id] = n
		changed = true
	}
	for _, name := range names {
		if h := hostOf(name); h != "" && !n.hosts[h] {
			n.hosts[h] = true
			changed = true
		}
	}
	if changed {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// hostOf returns the hostname in a resource name: "outbound|<port>||<host>"
// or "<host>:<port>".
func hostOf(name string) string {
	if rest, ok := strings.CutPrefix(name, "outbound|"); ok {
		if _, host, ok := strings.Cut(rest, "||"); ok {
			return host
		}
	}
	if host, _, err := net.SplitHostPort(name); err == nil {
		return host
	}
	return ""
}

// Run rebuilds every node's snapshot on each registry change after snap
// and each new node or subscription, until ctx ends.
func (b *Baseline) Run(ctx context.Context, snap clusterset.Snapshot) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-snap.Done():
			snap, _ = clusterset.Newest(snap)
		case <-b.kick:
		}
		if err := b.setAll(ctx, snap); err != nil {
			return err
		}
	}
}

func (b *Baseline) setAll(ctx context.Context, snap clusterset.Snapshot) error {
	b.mu.Lock()
	nodes := make([]baselineNode, 0, len(b.nodes))
	for _, n := range b.nodes {
		hosts := make(map[string]bool, len(n.hosts))
		for h := range n.hosts {
			hosts[h] = true
		}
		nodes = append(nodes, baselineNode{node: n.node, ads: n.ads, hosts: hosts})
	}
	b.mu.Unlock()

	byHost := map[string]*clusterset.ServiceView{}
	for _, v := range snap.Services() {
		for _, h := range resources.Hostnames(v) {
			byHost[h] = v
		}
	}
	clusters := snap.Clusters()
	gateways := snap.Gateways()
	version := strconv.FormatUint(snap.Revision(), 10)
	for _, n := range nodes {
		proxy, err := xds.ProxyFromNode(n.ads, clusters)
		if err != nil {
			continue
		}
		res := map[resourcev3.Type][]types.Resource{}
		for host := range n.hosts {
			v, ok := byHost[host]
			if !ok {
				continue
			}
			for _, c := range reference.Clusters(v) {
				res[resourcev3.ClusterType] = append(res[resourcev3.ClusterType], c)
			}
			vips := snap.Import(v.Key).ClustersetIPs
			for _, l := range reference.Listeners(v, vips) {
				res[resourcev3.ListenerType] = append(res[resourcev3.ListenerType], l)
			}
			for _, r := range reference.Routes(v, vips) {
				res[resourcev3.RouteType] = append(res[resourcev3.RouteType], r)
			}
			for _, p := range resources.Ports(v) {
				res[resourcev3.EndpointType] = append(res[resourcev3.EndpointType], reference.LoadAssignment(resources.Assignment(v, host, p, proxy.View(), gateways)))
			}
		}
		s, err := cache.NewSnapshot(version, res)
		if err != nil {
			return err
		}
		if err := b.cache.SetSnapshot(ctx, n.node.GetId(), s); err != nil {
			return err
		}
	}
	return nil
}

// adsNode is node as the hub's messages carry it: the same encoding.
func adsNode(node *core.Node) *adspb.Node {
	out := &adspb.Node{}
	b, err := proto.Marshal(node)
	if err == nil {
		err = proto.Unmarshal(b, out)
	}
	if err != nil {
		return &adspb.Node{Id: node.GetId()} // read like a node without metadata
	}
	return out
}
