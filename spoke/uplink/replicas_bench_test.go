package uplink

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/shard"
)

// ackingHub plays a hub replica at the far end of s that costs the spoke
// nothing of its own: it welcomes, marshals each message as the gRPC
// transport would (that encoding is the spoke's per-replica work), and
// acknowledges each update when its last chunk arrives, until s ends.
type ackingHub struct {
	bytes atomic.Int64
	acked chan uint64
}

func (h *ackingHub) serve(s *memStream) {
	for {
		var m *federationpb.SpokeMessage
		select {
		case m = <-s.up:
		case <-s.ctx.Done():
			return
		}
		b, _ := proto.Marshal(m)
		h.bytes.Add(int64(len(b)))
		switch u := m.GetUpdate(); {
		case m.GetHello() != nil:
			s.answer(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Welcome{Welcome: &federationpb.Welcome{HubId: "bench"}}})
		case u != nil && !u.GetMore():
			s.answer(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Ack{Ack: &federationpb.Ack{Version: u.GetVersion(), Nonce: u.GetNonce()}}})
			h.acked <- u.GetVersion()
		}
	}
}

// BenchmarkReplicas measures what a spoke pays per change for each hub
// replica it streams to: one endpoint changed in a shard of 1,000
// services of 10 endpoints, sent and acknowledged by every replica. The
// change is encoded once; each replica adds its own chunk and its
// message's marshalling.
func BenchmarkReplicas(b *testing.B) {
	const services, perService = 1_000, 10
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			ctx, cancel := context.WithCancel(b.Context())
			tr := shard.NewTracker()
			endpointsOf := func(svc int) []*federationpb.Endpoint {
				eps := make([]*federationpb.Endpoint, perService)
				for i := range eps {
					eps[i] = &federationpb.Endpoint{
						Namespace: "demo", Service: fmt.Sprint("svc-", svc), Address: fmt.Sprintf("10.%d.%d.%d", svc>>8, svc&255, i), Ready: true,
						Ports: []*federationpb.EndpointPort{{Name: "grpc", Port: 8080}},
					}
				}
				return eps
			}
			hubs := make([]*ackingHub, replicas)
			done := make(chan struct{}, replicas)
			for i := range hubs {
				h := &ackingHub{acked: make(chan uint64, 4)}
				hubs[i] = h
				s := &memStream{ctx: ctx, close: cancel, up: make(chan *federationpb.SpokeMessage, 8), down: make(chan *federationpb.HubMessage, 8)}
				go h.serve(s)
				u := New(Config{ClusterID: "east", Hub: fmt.Sprint("hub-", i)}, tr.Open(),
					func(context.Context) (Stream, error) { return s, nil }, slog.New(slog.DiscardHandler))
				go func() {
					defer func() { done <- struct{}{} }()
					_ = u.Run(ctx)
				}()
			}
			b.Cleanup(func() {
				cancel()
				for range hubs {
					<-done
				}
			})
			tr.Update(time.Now(), true, func(w shard.Writer) {
				w.SetCluster(&federationpb.Cluster{Id: "east", Network: "n1"})
				for svc := range services {
					if err := w.SetEndpoints(fmt.Sprint("demo/svc-", svc), endpointsOf(svc)); err != nil {
						b.Fatal(err)
					}
				}
			})
			eps := endpointsOf(0)
			for _, h := range hubs {
				<-h.acked // the full state
			}
			before := int64(0)
			for _, h := range hubs {
				before += h.bytes.Load()
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				eps[0] = proto.CloneOf(eps[0])
				eps[0].Ready = i%2 == 1
				tr.Update(time.Now(), true, func(w shard.Writer) {
					if err := w.SetEndpoints("demo/svc-0", eps); err != nil {
						b.Fatal(err)
					}
				})
				for _, h := range hubs {
					<-h.acked
				}
			}
			var sent int64
			for _, h := range hubs {
				sent += h.bytes.Load()
			}
			b.ReportMetric(float64(sent-before)/float64(b.N), "bytes/change")
		})
	}
}
