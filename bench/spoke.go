package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/uplink"
)

// simSpoke is one cluster's spoke without Kubernetes: the real shard
// tracker and uplink (a real federation client over gRPC), fed by the
// harness instead of informers.
type simSpoke struct {
	c      int
	w      world
	conn   *grpc.ClientConn
	t      *shard.Tracker
	uplink *uplink.Uplink

	mu        sync.Mutex // orders the churn's writes and the resyncs
	pods      []pod      // the cluster's endpoints, by index
	byService map[int][]int
}

func newSimSpoke(w world, c int, hubAddr string, log *slog.Logger) (*simSpoke, error) {
	conn, err := grpc.NewClient(hubAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(fastReconnect),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(4<<20), grpc.MaxCallRecvMsgSize(4<<20)))
	if err != nil {
		return nil, fmt.Errorf("spoke %s: %w", clusterID(c), err)
	}
	client := federationpb.NewFederationClient(conn)
	s := &simSpoke{c: c, w: w, conn: conn, t: shard.NewTracker(), byService: map[int][]int{}}
	dial := func(ctx context.Context) (uplink.Stream, error) { return client.Sync(ctx) }
	s.uplink = uplink.New(uplink.Config{ClusterID: clusterID(c), Build: "bench", MaxBackoff: time.Second},
		s.t.Open(), dial, log.With("cluster", clusterID(c)))
	s.pods = w.initialPods(c)
	for i, p := range s.pods {
		s.byService[p.service] = append(s.byService[p.service], i)
	}
	s.t.Update(time.Now(), true, func(wr shard.Writer) { err = s.write(wr) })
	if err != nil {
		return nil, err
	}
	return s, nil
}

// write writes the cluster's whole shard.
func (s *simSpoke) write(wr shard.Writer) error {
	var errs []error
	wr.SetCluster(cluster(s.c))
	for _, g := range s.w.exportsOf(s.c) {
		errs = append(errs, wr.PutService(service(g)), wr.SetEndpoints(serviceKey(g), s.endpoints(g)))
	}
	for _, p := range s.pods {
		errs = append(errs, wr.PutWorkload(p.workload(s.c)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("spoke %s: %w", clusterID(s.c), err)
	}
	return nil
}

// resync writes the shard anew for a hub that lost it (or rejected an
// update). The churn replaces pods meanwhile: mu orders the two.
func (s *simSpoke) resync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Update(time.Now(), false, func(wr shard.Writer) {
		wr.Reset()
		_ = s.write(wr) // the same objects were written without error before
	})
}

// fastReconnect lets clients and spokes come back within a second of a
// hub restart (grpc-go's default backoff grows to two minutes).
var fastReconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
}

func (s *simSpoke) endpoints(g int) []*federationpb.Endpoint {
	idx := s.byService[g]
	out := make([]*federationpb.Endpoint, len(idx))
	for j, i := range idx {
		out[j] = s.pods[i].endpoint(s.c)
	}
	return out
}

// replace swaps the cluster's i-th pod for a new one at address, as a
// rollout does; now is when the spoke observed it.
func (s *simSpoke) replace(i int, address, uid string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.pods[i]
	p := old
	p.address, p.uid = address, uid
	s.pods[i] = p
	var err error
	s.t.Update(now, true, func(wr shard.Writer) {
		err = wr.SetEndpoints(serviceKey(p.service), s.endpoints(p.service))
		wr.DeleteWorkload(old.uid)
		err = errors.Join(err, wr.PutWorkload(p.workload(s.c)))
	})
	if err != nil {
		return fmt.Errorf("spoke %s: %w", clusterID(s.c), err)
	}
	return nil
}

// run runs the uplink and the resyncs until ctx ends.
func (s *simSpoke) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.uplink.Run(ctx) })
	g.Go(func() error {
		s.t.AnswerResyncs(ctx, s.resync)
		return nil
	})
	return g.Wait()
}

func (s *simSpoke) close() { _ = s.conn.Close() }
