package istiodtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	"istio.io/istio/pkg/workloadapi"
	"istio.io/istio/pkg/workloadapi/security"
)

// The workload API's types, as a ztunnel subscribes to them.
const (
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// ZtunnelNode is the ztunnel pod a [Ztunnel] claims to be.
type ZtunnelNode struct {
	// IP and Pod make the node ID
	// ztunnel~IP~Pod.istio-system~istio-system.svc.cluster.local.
	IP, Pod string
	// ClusterID, Network and NodeName are its metadata CLUSTER_ID,
	// NETWORK and NODE_NAME.
	ClusterID, Network, NodeName string
}

// Ztunnel talks to istiod as a ztunnel does: one delta ADS stream that
// subscribes to every Address and Authorization, and ACKs every response.
type Ztunnel struct {
	conn   *grpc.ClientConn
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	addresses map[string]*workloadapi.Address
	policies  map[string]*security.Authorization
	removed   []string // every address removed, in order
	err       error
	changed   chan struct{} // closed and replaced on every response
}

// DialZtunnel opens a ztunnel's stream to istiod's plaintext xDS address,
// and closes it in t.Cleanup.
func DialZtunnel(t testing.TB, addr string, n ZtunnelNode) *Ztunnel {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"CLUSTER_ID": n.ClusterID, "NETWORK": n.Network, "NODE_NAME": n.NodeName, "NAMESPACE": SystemNamespace})
	if err != nil {
		t.Fatalf("istiodtest: ztunnel node: %v", err)
	}
	node := &corev3.Node{Id: fmt.Sprintf("ztunnel~%s~%s.%s~%s.svc.cluster.local", n.IP, n.Pod, SystemNamespace, SystemNamespace), Metadata: md}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("istiodtest: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		t.Fatalf("istiodtest: delta ADS stream to %s: %v", addr, err)
	}
	z := &Ztunnel{
		conn: conn, stream: stream, cancel: cancel, done: make(chan struct{}),
		addresses: map[string]*workloadapi.Address{}, policies: map[string]*security.Authorization{}, changed: make(chan struct{}),
	}
	t.Cleanup(z.Close)
	for _, typ := range []string{AddressType, AuthorizationType} {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
			t.Fatalf("istiodtest: ztunnel request for %s: %v", typ, err)
		}
	}
	go z.receive()
	return z
}

// Close ends the stream and waits for the receiving goroutine.
func (z *Ztunnel) Close() {
	z.cancel()
	<-z.done
	_ = z.conn.Close()
}

func (z *Ztunnel) receive() {
	defer close(z.done)
	for {
		resp, err := z.stream.Recv()
		if err == nil {
			err = z.store(resp)
		}
		if err == nil {
			err = z.stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()})
		}
		if err != nil {
			z.mu.Lock()
			if z.err == nil {
				z.err = err
			}
			close(z.changed)
			z.changed = make(chan struct{})
			z.mu.Unlock()
			z.cancel()
			return
		}
	}
}

func (z *Ztunnel) store(resp *discoveryv3.DeltaDiscoveryResponse) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, r := range resp.GetResources() {
		switch resp.GetTypeUrl() {
		case AddressType:
			a := &workloadapi.Address{}
			if err := r.GetResource().UnmarshalTo(a); err != nil {
				return fmt.Errorf("address %s: %w", r.GetName(), err)
			}
			z.addresses[r.GetName()] = a
		case AuthorizationType:
			p := &security.Authorization{}
			if err := r.GetResource().UnmarshalTo(p); err != nil {
				return fmt.Errorf("authorization %s: %w", r.GetName(), err)
			}
			z.policies[r.GetName()] = p
		}
	}
	for _, name := range resp.GetRemovedResources() {
		if resp.GetTypeUrl() == AddressType {
			delete(z.addresses, name)
			z.removed = append(z.removed, name)
		} else {
			delete(z.policies, name)
		}
	}
	close(z.changed)
	z.changed = make(chan struct{})
	return nil
}

// State is what a ztunnel holds: its addresses and policies, by name.
type State struct {
	Addresses map[string]*workloadapi.Address
	Policies  map[string]*security.Authorization
}

// State returns a copy of what the ztunnel holds now.
func (z *Ztunnel) State() State {
	z.mu.Lock()
	defer z.mu.Unlock()
	return State{Addresses: maps.Clone(z.addresses), Policies: maps.Clone(z.policies)}
}

// Removed returns every address name istiod removed, in order.
func (z *Ztunnel) Removed() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Clone(z.removed)
}

// Await waits until cond holds on what the ztunnel holds, and returns
// that state; or the last one and an error when ctx ends or the stream
// does. It may be called from any goroutine.
func (z *Ztunnel) Await(ctx context.Context, cond func(State) bool) (State, error) {
	for {
		z.mu.Lock()
		changed, err := z.changed, z.err
		z.mu.Unlock()
		st := z.State()
		if cond(st) {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// Wait waits until cond holds on what the ztunnel holds, and fails the
// test with the last state's description (describe) when it does not
// within timeout or the stream ends.
func (z *Ztunnel) Wait(t testing.TB, what string, timeout time.Duration, cond func(State) bool, describe func(State) string) State {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	st, err := z.Await(ctx, cond)
	if err != nil {
		t.Fatalf("istiodtest: ztunnel, waiting for %s: %v; holds %s", what, err, describe(st))
	}
	return st
}
