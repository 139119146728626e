package istiodtest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Proxy is who an [ADSClient] says it is: a sidecar (Envoy), or a
// proxyless gRPC client, in a pod of a cluster and network.
type Proxy struct {
	// IP, Pod and Namespace make the node ID
	// sidecar~IP~Pod.Namespace~Namespace.svc.cluster.local.
	IP, Pod, Namespace string
	// ClusterID and Network are the node metadata CLUSTER_ID and NETWORK:
	// the cluster the proxy runs in and the network it reaches endpoints
	// on directly (istiod's split horizon).
	ClusterID, Network string
	// Proxyless makes the node a proxyless gRPC client (metadata
	// GENERATOR "grpc"): istiod answers with its gRPC generator.
	Proxyless bool
	// Locality is the node's locality; nil: none.
	Locality *corev3.Locality
}

// ID returns the node ID istiod parses into the proxy's type, IP, pod and
// namespace.
func (p Proxy) ID() string {
	return fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", p.IP, p.Pod, p.Namespace, p.Namespace)
}

// Node returns the xDS node an [ADSClient] sends as p.
func (p Proxy) Node() (*corev3.Node, error) {
	md := map[string]any{"NAMESPACE": p.Namespace}
	if p.ClusterID != "" {
		md["CLUSTER_ID"] = p.ClusterID
	}
	if p.Network != "" {
		md["NETWORK"] = p.Network
	}
	if p.Proxyless {
		md["GENERATOR"] = "grpc"
	}
	metadata, err := structpb.NewStruct(md)
	if err != nil {
		return nil, err
	}
	n := &corev3.Node{Id: p.ID(), Metadata: metadata, Locality: p.Locality}
	if p.Proxyless {
		// What grpc-go says of itself (gRFC A27).
		n.UserAgentName, n.ClientFeatures = "gRPC Go", []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"}
	}
	return n, nil
}

// ADSClient is a raw state-of-the-world ADS client of istiod's plaintext
// xDS port: it subscribes to the clusters (CDS: every one as a sidecar
// does, by name as a proxyless gRPC client does) and to the endpoints of
// the clusters it is asked about (EDS), ACKs each response, and keeps the
// last of each resource.
type ADSClient struct {
	conn   *grpc.ClientConn
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel context.CancelFunc
	done   chan struct{} // closed when the receiving goroutine has ended

	sendMu sync.Mutex // the stream's Send is not safe for concurrent use

	proxyless bool

	mu       sync.Mutex
	node     *corev3.Node // sent on the first request only
	clusters map[string]*clusterv3.Cluster
	eds      map[string]*endpointv3.ClusterLoadAssignment
	edsAt    map[string]time.Time // cluster name → when its last assignment arrived
	names    map[string][]string  // type URL → its subscription, sorted; nil: every resource
	acked    map[string][2]string // type URL → last response's version and nonce
	changed  chan struct{}        // closed and replaced on every response
	err      error                // why the stream ended, once it has
}

// Dial opens an ADS stream to istiod's xDS address as p, subscribes a
// sidecar to every cluster, and closes the stream in t.Cleanup.
func Dial(t testing.TB, addr string, p Proxy) *ADSClient {
	t.Helper()
	node, err := p.Node()
	if err != nil {
		t.Fatalf("istiodtest: node: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("istiodtest: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		t.Fatalf("istiodtest: ADS stream to %s: %v", addr, err)
	}
	c := &ADSClient{
		conn:      conn,
		stream:    stream,
		cancel:    cancel,
		done:      make(chan struct{}),
		proxyless: p.Proxyless,
		node:      node,
		clusters:  map[string]*clusterv3.Cluster{},
		eds:       map[string]*endpointv3.ClusterLoadAssignment{},
		edsAt:     map[string]time.Time{},
		names:     map[string][]string{},
		acked:     map[string][2]string{},
		changed:   make(chan struct{}),
	}
	t.Cleanup(c.Close)
	go c.receive()
	// A proxyless client asks for clusters by name only (istiod's gRPC
	// generator answers no wildcard), in WaitCluster.
	if !p.Proxyless {
		if err := c.request(resourcev3.ClusterType, nil); err != nil {
			t.Fatalf("istiodtest: CDS request: %v", err)
		}
	}
	return c
}

// Close ends the stream and waits for the receiving goroutine.
func (c *ADSClient) Close() {
	c.cancel()
	<-c.done
	_ = c.conn.Close()
}

// request sends the subscription of typeURL (names: nil for every
// resource), with the version and nonce of its last response.
func (c *ADSClient) request(typeURL string, names []string) error {
	c.mu.Lock()
	last := c.acked[typeURL]
	req := &discoveryv3.DiscoveryRequest{
		Node:          c.node,
		TypeUrl:       typeURL,
		ResourceNames: names,
		VersionInfo:   last[0],
		ResponseNonce: last[1],
	}
	c.node = nil
	c.mu.Unlock()
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.stream.Send(req)
}

// receive stores every response and ACKs it, until the stream ends.
func (c *ADSClient) receive() {
	defer close(c.done)
	for {
		resp, err := c.stream.Recv()
		at := time.Now()
		if err != nil {
			c.mu.Lock()
			if c.err == nil {
				c.err = err
			}
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
			return
		}
		names, err := c.store(resp, at)
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("%s response %s: %w", resp.GetTypeUrl(), resp.GetVersionInfo(), err)
			c.mu.Unlock()
			// A NACK would hide the bad response from the test: end the
			// stream instead, so every wait reports it.
			c.cancel()
			continue
		}
		if err := c.request(resp.GetTypeUrl(), names); err != nil {
			continue // Recv reports the stream's end
		}
	}
}

// store keeps resp's resources, which arrived at at, and returns the names
// to ACK it with.
func (c *ADSClient) store(resp *discoveryv3.DiscoveryResponse, at time.Time) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch resp.GetTypeUrl() {
	case resourcev3.ClusterType:
		// Every cluster, every time: what is missing is gone.
		clusters := map[string]*clusterv3.Cluster{}
		for _, r := range resp.GetResources() {
			cl := &clusterv3.Cluster{}
			if err := r.UnmarshalTo(cl); err != nil {
				return nil, err
			}
			clusters[cl.GetName()] = cl
		}
		c.clusters = clusters
	case resourcev3.EndpointType:
		// The endpoints of the clusters that changed: the others keep
		// what they had.
		for _, r := range resp.GetResources() {
			cla := &endpointv3.ClusterLoadAssignment{}
			if err := r.UnmarshalTo(cla); err != nil {
				return nil, err
			}
			c.eds[cla.GetClusterName()] = cla
			c.edsAt[cla.GetClusterName()] = at
		}
	}
	c.acked[resp.GetTypeUrl()] = [2]string{resp.GetVersionInfo(), resp.GetNonce()}
	close(c.changed)
	c.changed = make(chan struct{})
	return c.names[resp.GetTypeUrl()], nil
}

// subscribe adds name to typeURL's subscription, and sends it if it grew.
func (c *ADSClient) subscribe(typeURL, name string) error {
	c.mu.Lock()
	names := c.names[typeURL]
	if _, found := slices.BinarySearch(names, name); found {
		c.mu.Unlock()
		return nil
	}
	names = append(slices.Clone(names), name)
	slices.Sort(names)
	c.names[typeURL] = names
	c.mu.Unlock()
	return c.request(typeURL, names)
}

// WaitCluster waits until CDS has the cluster name (outbound|PORT||HOST)
// and returns it; it fails the test after [WaitTimeout].
func (c *ADSClient) WaitCluster(t testing.TB, name string) *clusterv3.Cluster {
	t.Helper()
	if c.proxyless {
		if err := c.subscribe(resourcev3.ClusterType, name); err != nil {
			t.Fatalf("istiodtest: CDS request %s: %v", name, err)
		}
	}
	var got *clusterv3.Cluster
	c.wait(t, "CDS cluster "+name, func() (bool, string) {
		got = c.clusters[name]
		return got != nil, fmt.Sprintf("%d other clusters", len(c.clusters))
	})
	return got
}

// WaitEDS subscribes to the endpoints of the cluster name
// (outbound|PORT||HOST) if it has not yet, and waits until they satisfy
// cond, which gets nil until istiod has sent any; it returns the
// assignment cond accepted, and fails the test after [WaitTimeout].
func (c *ADSClient) WaitEDS(t testing.TB, name string, cond func(*endpointv3.ClusterLoadAssignment) bool) *endpointv3.ClusterLoadAssignment {
	t.Helper()
	if err := c.subscribe(resourcev3.EndpointType, name); err != nil {
		t.Fatalf("istiodtest: EDS request %s: %v", name, err)
	}
	var got *endpointv3.ClusterLoadAssignment
	c.wait(t, "EDS "+name, func() (bool, string) {
		got = c.eds[name]
		return cond(got), fmt.Sprintf("%v", Endpoints(got))
	})
	return got
}

// EDS returns the last endpoints istiod sent for the cluster name, or nil.
func (c *ADSClient) EDS(name string) *endpointv3.ClusterLoadAssignment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eds[name]
}

// EDSReceived returns when the last endpoints of the cluster name arrived
// (zero before any did): a latency measured from it leaves out how long the
// test took to look.
func (c *ADSClient) EDSReceived(name string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.edsAt[name]
}

// wait calls check, under c.mu, after every response until it is true,
// and fails the test with check's description of the last state when the
// stream ends or WaitTimeout passes.
func (c *ADSClient) wait(t testing.TB, what string, check func() (ok bool, last string)) {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		ok, last := check()
		changed, err := c.changed, c.err
		c.mu.Unlock()
		switch {
		case ok:
			return
		case err != nil:
			t.Fatalf("istiodtest: %s: stream ended: %v (last: %s)", what, err, last)
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("istiodtest: %s: not as wanted within %v (last: %s)", what, WaitTimeout, last)
		}
	}
}

// Endpoint is one endpoint of a ClusterLoadAssignment, flattened for
// comparisons.
type Endpoint struct {
	// Address is IP:port.
	Address string
	// Locality is region/zone/subzone, empty parts included.
	Locality       string
	Priority       uint32
	LocalityWeight uint32
	Weight         uint32
	Health         corev3.HealthStatus
	// Metadata holds each filter_metadata field as "FILTER/FIELD": a
	// string as it is, any other value as JSON. Istio's tlsMode is
	// "envoy.transport_socket_match/tlsMode".
	Metadata map[string]string
}

// String formats e as "10.2.0.1:8080@region/zone/ (weight 1)".
func (e Endpoint) String() string {
	return fmt.Sprintf("%s@%s (weight %d)", e.Address, e.Locality, e.Weight)
}

// Endpoints flattens cla's endpoints, sorted by address; nil when cla is
// nil or empty.
func Endpoints(cla *endpointv3.ClusterLoadAssignment) []Endpoint {
	var out []Endpoint
	for _, group := range cla.GetEndpoints() {
		l := group.GetLocality()
		locality := strings.Join([]string{l.GetRegion(), l.GetZone(), l.GetSubZone()}, "/")
		for _, lb := range group.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			e := Endpoint{
				Address:        net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))),
				Locality:       locality,
				Priority:       group.GetPriority(),
				LocalityWeight: group.GetLoadBalancingWeight().GetValue(),
				Weight:         lb.GetLoadBalancingWeight().GetValue(),
				Health:         lb.GetHealthStatus(),
			}
			for filter, fields := range lb.GetMetadata().GetFilterMetadata() {
				for key, v := range fields.GetFields() {
					if e.Metadata == nil {
						e.Metadata = map[string]string{}
					}
					value := v.GetStringValue()
					if _, ok := v.GetKind().(*structpb.Value_StringValue); !ok {
						data, _ := protojson.Marshal(v)
						value = string(data)
					}
					e.Metadata[filter+"/"+key] = value
				}
			}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.Address, b.Address) })
	return out
}

// Addresses returns the addresses (IP:port) of cla's endpoints, sorted.
func Addresses(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, e := range Endpoints(cla) {
		out = append(out, e.Address)
	}
	return out
}

// HasAddresses returns a condition for [ADSClient.WaitEDS]: the cluster's
// endpoint addresses are exactly want (IP:port), in any order.
func HasAddresses(want ...string) func(*endpointv3.ClusterLoadAssignment) bool {
	want = slices.Sorted(slices.Values(want))
	return func(cla *endpointv3.ClusterLoadAssignment) bool {
		return cla != nil && slices.Equal(Addresses(cla), want)
	}
}
