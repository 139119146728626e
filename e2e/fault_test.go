//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/uplink"
)

// The fault tests run the spoke's and the hub's halves of the protocol
// against each other (the real tracker, uplink, ingest server and
// registry) over a memNet, and end when the hub holds exactly the spoke's
// shard.

const (
	faultEndpoints = 300     // a full state of several chunks
	faultMaxBytes  = 8 << 10 // the hub's limit, which the spoke chunks below
)

// faultSpoke is one cluster's spoke: a tracker, its uplink, and the writer
// of its shard, which also answers the tracker's resyncs.
type faultSpoke struct {
	t tracker
	u *uplink.Uplink

	mu        sync.Mutex
	endpoints []*federationpb.Endpoint // of demo/echo
	workloads []*federationpb.Workload
	dial      uplink.Dialer
}

func startFaultSpoke(t *testing.T, n *memNet, endpoints int) *faultSpoke {
	t.Helper()
	sp := &faultSpoke{t: newTracker(), endpoints: testEndpoints("demo", "echo", endpoints, 1), dial: n.dial}
	for i, e := range sp.endpoints[:3] {
		sp.workloads = append(sp.workloads, &federationpb.Workload{
			Uid: fmt.Sprintf("uid-%d", i), Namespace: "demo", Name: fmt.Sprintf("echo-%d", i), Ips: []string{e.GetAddress()},
		})
	}
	sp.t.Update(time.Now(), true, sp.write)
	sp.u = uplink.New(uplink.Config{
		ClusterID: "east", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		WelcomeTimeout: 500 * time.Millisecond, AckTimeout: 500 * time.Millisecond,
	}, sp.t, func(ctx context.Context) (uplink.Stream, error) {
		sp.mu.Lock()
		dial := sp.dial
		sp.mu.Unlock()
		return dial(ctx)
	}, testLogger(t))
	runInBackground(t, sp.u.Run)
	runInBackground(t, sp.resync)
	return sp
}

func (sp *faultSpoke) write(w shard.Writer) {
	w.SetCluster(testCluster("east", "n1"))
	must(w.PutService(testService("demo", "echo")))
	must(w.SetEndpoints("demo/echo", sp.endpoints))
	for _, wl := range sp.workloads {
		must(w.PutWorkload(wl))
	}
}

func (sp *faultSpoke) resync(ctx context.Context) error {
	sp.t.AnswerResyncs(ctx, func() {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		sp.t.Update(time.Now(), false, func(w shard.Writer) {
			w.Reset()
			sp.write(w)
		})
	})
	return nil
}

// change edits the spoke's objects and writes the change.
func (sp *faultSpoke) change(fn func(sp *faultSpoke)) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	fn(sp)
	sp.t.Update(time.Now(), true, sp.write)
}

// replaceEndpoints gives the first n endpoints new addresses: a delta of
// several chunks.
func replaceEndpoints(n int) func(*faultSpoke) {
	return func(sp *faultSpoke) {
		sp.endpoints = append(testEndpoints("demo", "echo", n, 10_000), sp.endpoints[n:]...)
	}
}

// removedEndpoint is what the last, small delta of every test removes.
const removedEndpoint = "demo/echo/10.0.1.44"

func removeOne(sp *faultSpoke) {
	sp.endpoints = slices.DeleteFunc(sp.endpoints, func(e *federationpb.Endpoint) bool { return federation.EndpointKey(e) == removedEndpoint })
}

var isSmallDelta = spokeMsg(func(m *federationpb.SpokeMessage) bool {
	return slices.Contains(m.GetUpdate().GetRemovedEndpoints(), removedEndpoint)
})

// diff says how the hub's shard of east differs from the spoke's.
func (sp *faultSpoke) diff(s clusterset.Snapshot) string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var problems []string
	want := map[string]*federationpb.Endpoint{}
	for _, e := range sp.endpoints {
		want[federation.EndpointKey(e)] = e
	}
	var services int
	for _, v := range s.Services() {
		for _, c := range v.Clusters {
			if c.Cluster != "east" {
				continue
			}
			services++
			if !proto.Equal(c.Service, testService("demo", "echo")) {
				problems = append(problems, fmt.Sprintf("service %s differs", v.Key))
			}
			extra := 0
			for _, e := range c.Endpoints {
				if pb := e.Proto(); !proto.Equal(pb, want[federation.EndpointKey(pb)]) {
					extra++
				}
			}
			if extra > 0 || len(c.Endpoints) != len(want) {
				problems = append(problems, fmt.Sprintf("%d endpoints (%d not the spoke's), want %d", len(c.Endpoints), extra, len(want)))
			}
		}
	}
	if services != 1 {
		problems = append(problems, fmt.Sprintf("%d services, want 1", services))
	}
	var workloads []*federationpb.Workload
	for _, w := range s.Workloads() {
		if w.Cluster == "east" {
			workloads = append(workloads, w.Proto())
		}
	}
	if !slices.EqualFunc(workloads, sp.workloads, func(a, b *federationpb.Workload) bool { return proto.Equal(a, b) }) {
		problems = append(problems, fmt.Sprintf("%d workloads differ from the spoke's %d", len(workloads), len(sp.workloads)))
	}
	return strings.Join(problems, "; ")
}

// converged waits until the spoke has nothing unacknowledged and the hub
// holds exactly its shard at the version it acknowledged last.
func converged(t *testing.T, n *memNet, sp *faultSpoke) {
	t.Helper()
	var diff string
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		h := sp.t.Hello("", "")
		st := n.reg.Status()
		if h.GetAckedVersion() == h.GetSentVersion() && !sp.t.Pending() && len(st) == 1 && st[0].ShardVersion == h.GetAckedVersion() {
			if diff = sp.diff(n.reg.Current()); diff == "" {
				return
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the hub and the spoke did not converge: %s; spoke acked %d of %d, hub status %+v, uplink %+v",
				diff, h.GetAckedVersion(), h.GetSentVersion(), st, sp.u.Status())
		}
	}
}

// runFault syncs a spoke through n: its full state, a delta of several
// chunks, then a delta of one; the hub must hold the spoke's shard after
// each, and every fault must have fired.
func runFault(t *testing.T, n *memNet) *faultSpoke {
	t.Helper()
	sp := startFaultSpoke(t, n, faultEndpoints)
	converged(t, n, sp)
	sp.change(replaceEndpoints(faultEndpoints / 2))
	converged(t, n, sp)
	sp.change(removeOne)
	converged(t, n, sp)
	if !n.fired() {
		t.Error("a fault never fired: the test did not run what it names")
	}
	return sp
}

type faultCase struct {
	name  string
	fault *fault
}

func runFaults(t *testing.T, cases []faultCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runFault(t, newMemNet(t, registry.Limits{}, faultMaxBytes, tc.fault))
		})
	}
}

// TestFaultLostMessages: whatever the hub does not get or does not answer,
// the spoke's timeouts end the stream, and it resumes or resends.
func TestFaultLostMessages(t *testing.T) {
	runFaults(t, []faultCase{
		{"hello", &fault{toHub: true, match: isHello, action: drop}},
		{"welcome", &fault{match: isWelcome, action: drop}},
		{"a chunk of the full state", &fault{toHub: true, match: isChunk(true, false), action: drop}}, // the last: any other is not detectable
		{"a one-chunk delta", &fault{toHub: true, match: isSmallDelta, action: drop}},
		{"the last chunk of a delta", &fault{toHub: true, match: isChunk(false, false), action: drop}},
		{"an ack", &fault{match: isAck, action: drop}},
		{"every answer: a stalled hub", &fault{match: nth(2, isAck), action: stall}},
		{"every chunk: a hub that stopped reading", &fault{toHub: true, match: isChunk(true, true), action: stall}},
	})
}

// TestFaultDuplicatedMessages: a message delivered twice never applies a
// wrong shard.
func TestFaultDuplicatedMessages(t *testing.T) {
	runFaults(t, []faultCase{
		{"hello", &fault{toHub: true, match: isHello, action: duplicate}},
		{"welcome", &fault{match: isWelcome, action: duplicate}},
		{"a chunk of the full state", &fault{toHub: true, match: nth(2, isChunk(true, true)), action: duplicate}},
		{"the last chunk of the full state", &fault{toHub: true, match: isChunk(true, false), action: duplicate}},
		{"a chunk of a delta", &fault{toHub: true, match: isChunk(false, true), action: duplicate}},
		{"a one-chunk delta", &fault{toHub: true, match: isSmallDelta, action: duplicate}},
		{"an ack", &fault{match: isAck, action: duplicate}},
	})
}

// TestFaultReorderedMessages: chunks delivered out of order never leave a
// wrong shard at the hub.
func TestFaultReorderedMessages(t *testing.T) {
	runFaults(t, []faultCase{
		{"the first two chunks of the full state", &fault{toHub: true, match: isChunk(true, true), action: delay}},
		{
			"a chunk of the full state after its last",
			&fault{toHub: true, match: nth(2, isChunk(true, true)), action: delay, until: isChunk(true, false)},
		},
		{
			"a chunk of a delta after its last",
			&fault{toHub: true, match: isChunk(false, true), action: delay, until: isChunk(false, false)},
		},
	})
}

// TestFaultNacks: the hub rejects what it cannot take and keeps its last
// good shard; the spoke converges once its shard is acceptable again.
func TestFaultNacks(t *testing.T) {
	badPort := func(sp *faultSpoke) {
		bad := testEndpoints("demo", "echo", 1, 50_000)[0]
		bad.Ports[0].Port = 70000
		sp.endpoints = append(sp.endpoints, bad)
	}
	fix := func(sp *faultSpoke) { sp.endpoints = sp.endpoints[:len(sp.endpoints)-1] }
	tests := []struct {
		name   string
		limits registry.Limits
		faults []*fault
		bad    func(*faultSpoke)
		reason string
	}{
		{"invalid object", registry.Limits{}, nil, badPort, "70000"},
		{"invalid object, its nack lost", registry.Limits{}, []*fault{{match: isNack, action: drop}}, badPort, "70000"},
		{"over limit", registry.Limits{MaxEndpoints: faultEndpoints}, nil, func(sp *faultSpoke) {
			sp.endpoints = append(sp.endpoints, testEndpoints("demo", "echo", 1, 50_000)...)
		}, "exceed the hub's cap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newMemNet(t, tc.limits, faultMaxBytes, tc.faults...)
			sp := startFaultSpoke(t, n, faultEndpoints)
			converged(t, n, sp)
			sp.change(tc.bad)
			testwait.For(t, "the nack", func() bool { return strings.Contains(sp.u.Status().LastNackReason, tc.reason) })
			if got := endpointsOf(n.reg.Current(), "demo/echo", "east"); len(got) != faultEndpoints || slices.Contains(got, "10.0.195.80") {
				t.Errorf("the hub holds %d endpoints after a rejected update, want its last good %d", len(got), faultEndpoints)
			}
			sp.change(fix)
			converged(t, n, sp)
			if !n.fired() {
				t.Error("a fault never fired")
			}
		})
	}
}

// TestFaultStaleVersion: an update that reaches the hub with an old
// version is rejected, and the spoke, whose update in flight is not
// answered, resumes on a new stream.
func TestFaultStaleVersion(t *testing.T) {
	runFault(t, newMemNet(t, registry.Limits{}, faultMaxBytes, &fault{
		toHub: true, match: isSmallDelta, action: rewrite,
		edit: func(m proto.Message) { m.(*federationpb.SpokeMessage).GetUpdate().Version = 1 },
	}))
}

// TestFaultNoBase: a hub that offers to resume a session it does not hold
// rejects the delta that follows, and takes the full state then.
func TestFaultNoBase(t *testing.T) {
	first := newMemNet(t, registry.Limits{}, faultMaxBytes)
	sp := startFaultSpoke(t, first, faultEndpoints)
	converged(t, first, sp)
	acked := ackedVersion(sp.t)
	second := newMemNet(t, registry.Limits{}, faultMaxBytes, &fault{match: isWelcome, action: rewrite, edit: func(m proto.Message) {
		w := m.(*federationpb.HubMessage).GetWelcome()
		w.Resume, w.Version = true, acked
	}})
	sp.mu.Lock()
	sp.dial = second.dial
	sp.mu.Unlock()
	first.reg.Connect("east", "") // supersedes the spoke's stream: it reconnects, to the second hub
	sp.change(removeOne)
	converged(t, second, sp)
	if !second.fired() {
		t.Error("the welcome was not rewritten")
	}
	if st := second.reg.Status(); st[0].Nacks != 1 || !strings.Contains(st[0].LastNackReason, registry.ErrNoBase.Error()) {
		t.Errorf("hub status %+v, want one NO_BASE nack", st[0])
	}
}

// TestFaultSupersededStream: a stream that broke without the hub noticing
// is superseded by the spoke's next one.
func TestFaultSupersededStream(t *testing.T) {
	n := newMemNet(t, registry.Limits{}, faultMaxBytes, &fault{match: isAck, action: cut})
	runFault(t, n)
	superseded := slices.ContainsFunc(n.sessionResults(), func(err error) bool {
		return status.Code(err) == codes.Aborted && status.Convert(err).Message() == registry.ErrSuperseded.Error()
	})
	if !superseded {
		t.Errorf("hub sessions ended with %v, want one superseded", n.sessionResults())
	}
}

// TestFaultChunkedFullState: an update far above the message limit, one
// of its chunks delivered twice and another after its last.
func TestFaultChunkedFullState(t *testing.T) {
	n := newMemNet(t, registry.Limits{}, faultMaxBytes,
		&fault{toHub: true, match: nth(20, isChunk(true, true)), action: duplicate},
		&fault{toHub: true, match: nth(40, isChunk(true, true)), action: delay, until: isChunk(true, false)},
	)
	sp := startFaultSpoke(t, n, 5_000)
	converged(t, n, sp)
	if !n.fired() {
		t.Error("a fault never fired: the full state is not in over 40 chunks")
	}
}
