package kube

import (
	"cmp"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/normalize"
	"github.com/meshfed/meshfed/spoke/shard"
	"github.com/meshfed/meshfed/spoke/shard/shardtest"
)

// fullShard builds the shard of in from scratch and returns it as the
// tracker's full update, its lists sorted.
func fullShard(t *testing.T, in normalize.Inputs, opts normalize.Options) *federationpb.ShardUpdate {
	t.Helper()
	tr := newTrackedShard()
	shard.NewBuilder(opts, tr.Tracker, slog.New(slog.NewTextHandler(io.Discard, nil))).Apply(in, nil)
	return sortedFull(t, tr)
}

// sortedFull returns the tracker's next update, which must be the full
// state, with its lists sorted. After a reconnect, the update waits for
// the builder to write the shard anew.
func sortedFull(t *testing.T, tr trackedShard) *federationpb.ShardUpdate {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	next := tr.Next("test", 0)
	for next == nil {
		select {
		case <-tr.Changed():
		case <-deadline.C:
			t.Fatalf("no update from the tracker within %v", waitTimeout)
		}
		next = tr.Next("test", 0)
	}
	u := shardtest.Assemble(t, shardtest.Chunks(next))
	if !u.GetFull() {
		t.Fatalf("tracker update is not the full state: %v", u)
	}
	u.Version, u.Nonce, u.ObservedTime = 0, "", nil
	slices.SortFunc(u.Services, func(a, b *federationpb.Service) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	slices.SortFunc(u.Endpoints, func(a, b *federationpb.Endpoint) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Service, b.Service), strings.Compare(a.Address, b.Address))
	})
	slices.SortFunc(u.Workloads, func(a, b *federationpb.Workload) int { return strings.Compare(a.Uid, b.Uid) })
	return u
}

// trackedShard is a shard tracker with one stream, to one hub.
type trackedShard struct {
	*shard.Tracker
	*shard.Stream
}

func newTrackedShard() trackedShard {
	t := shard.NewTracker()
	return trackedShard{t, t.Open()}
}
