package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/ingest"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testlog"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/uplink"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go's xDS client does not stop the certificate file watcher of
		// its "tls" channel credentials when the client closes (v1.85.0).
		goleak.IgnoreTopFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"))
}

func testLogger(t testing.TB) *slog.Logger {
	t.Helper()
	log, _ := testlog.New(t)
	return log
}

// memHub is an ingest server and registry on an in-memory gRPC transport.
type memHub struct {
	reg    *registry.Registry
	lis    *bufconn.Listener
	client federationpb.FederationClient

	mu     sync.Mutex
	chunks []*federationpb.ShardUpdate // every update message received
}

func newMemHub(t testing.TB, limits registry.Limits, maxMessageBytes int) *memHub {
	t.Helper()
	h := &memHub{reg: registry.New(registry.Config{Limits: limits}), lis: bufconn.Listen(1 << 20)}
	srv := ingest.NewServer(ingest.Config{MaxMessageBytes: maxMessageBytes, HubID: "test"}, h.reg, ingest.Insecure, nil, testLogger(t))
	g := grpc.NewServer(grpc.MaxRecvMsgSize(maxMessageBytes), grpc.ForceServerCodecV2(ingest.Codec{}), grpc.StreamInterceptor(h.record))
	federationpb.RegisterFederationServer(g, srv)
	go func() { _ = g.Serve(h.lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return h.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h.client = federationpb.NewFederationClient(conn)
	return h
}

// record keeps every update message the hub receives.
func (h *memHub) record(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &recordingStream{ServerStream: ss, h: h})
}

type recordingStream struct {
	grpc.ServerStream
	h *memHub
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if sm, ok := m.(*federationpb.SpokeMessage); ok && err == nil && sm.GetUpdate() != nil {
		s.h.mu.Lock()
		s.h.chunks = append(s.h.chunks, proto.CloneOf(sm.GetUpdate()))
		s.h.mu.Unlock()
	}
	return err
}

func (h *memHub) received() []*federationpb.ShardUpdate {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*federationpb.ShardUpdate(nil), h.chunks...)
}

// fullChunks counts the chunks of full updates the hub has received.
func (h *memHub) fullChunks() int {
	n := 0
	for _, c := range h.received() {
		if c.GetFull() {
			n++
		}
	}
	return n
}

// killableDialer opens streams that a test can break, as a network fault.
type killableDialer struct {
	client federationpb.FederationClient
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (d *killableDialer) dial(ctx context.Context) (uplink.Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	d.mu.Lock()
	d.cancel = cancel
	d.mu.Unlock()
	s, err := d.client.Sync(ctx)
	if err != nil {
		cancel()
	}
	return s, err
}

func (d *killableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		d.cancel()
	}
}

func newUplink(t testing.TB, cluster string, tr tracker, dial uplink.Dialer) *uplink.Uplink {
	t.Helper()
	return uplink.New(uplink.Config{ClusterID: cluster, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, tr, dial, testLogger(t))
}

// runUplink runs an uplink for t until the test ends.
func runUplink(t testing.TB, cluster string, tr tracker, dial uplink.Dialer) *uplink.Uplink {
	t.Helper()
	u := newUplink(t, cluster, tr, dial)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = u.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return u
}

// await waits for cond on the registry's snapshots, failing after 20s.
func await(t testing.TB, reg *registry.Registry, what string, cond func(clusterset.Snapshot) bool) clusterset.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := clusterset.Await(ctx, reg.Current(), cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return s
}

// endpointsOf returns the addresses of a service's endpoints in one cluster.
func endpointsOf(s clusterset.Snapshot, key string, cluster federation.ClusterID) []string {
	v, ok := s.Service(key)
	if !ok {
		return nil
	}
	var out []string
	for _, c := range v.Clusters {
		if c.Cluster == cluster {
			for _, e := range c.Endpoints {
				out = append(out, e.GetAddress())
			}
		}
	}
	return out
}

func testCluster(id, network string) *federationpb.Cluster {
	return &federationpb.Cluster{Id: id, Network: network, TrustDomain: "cluster.local"}
}

func testService(ns, name string) *federationpb.Service {
	return &federationpb.Service{
		Namespace: ns, Name: name, Hostname: name + "." + ns + ".svc.cluster.local",
		Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Ports:  []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, TargetPort: 8080}},
		Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT},
	}
}

func testEndpoints(ns, svc string, n int, base int) []*federationpb.Endpoint {
	out := make([]*federationpb.Endpoint, n)
	for i := range n {
		j := base + i
		out[i] = &federationpb.Endpoint{
			Namespace: ns, Service: svc,
			Address:  fmt.Sprintf("10.%d.%d.%d", j>>16&255, j>>8&255, j&255),
			Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
			Ready:    true,
			Serving:  true,
			Node:     "node-1",
			Locality: &federationpb.Locality{Region: "r1", Zone: "z1"},
		}
	}
	return out
}

// must panics on err: the tests write valid objects, so an error means a
// broken test.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// tracker is a spoke's shard tracker with one stream, to one hub.
type tracker struct {
	*shard.Tracker
	*shard.Stream
}

func newTracker() tracker {
	t := shard.NewTracker()
	return tracker{t, t.Open()}
}

// ackedVersion is the last version the hub acknowledged to tr, as its
// next Hello says.
func ackedVersion(tr tracker) uint64 { return tr.Hello("", "").GetAckedVersion() }

// fill writes a cluster with one service of n endpoints into a tracker.
func fill(tr tracker, cluster, network string, n int) {
	tr.Update(time.Now(), true, func(w shard.Writer) {
		w.SetCluster(testCluster(cluster, network))
		must(w.PutService(testService("demo", "echo")))
		must(w.SetEndpoints("demo/echo", testEndpoints("demo", "echo", n, 1)))
	})
}

// federationClient dials a hub's federation port in plaintext.
func federationClient(t *testing.T, addr string) federationpb.FederationClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return federationpb.NewFederationClient(conn)
}

// progress lets benchmark clients wake a waiter after each response.
type progress struct{ poke chan struct{} }

func newProgress() progress { return progress{poke: make(chan struct{}, 1)} }

func (p progress) signal() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// await returns once cond holds; clients signal after every response.
func (p progress) await(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-p.poke:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
