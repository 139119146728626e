package registry

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// TestShardChanges applies updates to a shard alone, without the
// registry, and checks what each says it changed: what a publish
// re-merges and names to readers.
func TestShardChanges(t *testing.T) {
	base := full("east", "n1", 1,
		[]*federationpb.Service{svc("echo"), svc("db")},
		[]*federationpb.Endpoint{ep("echo", "10.0.0.1"), ep("echo", "10.0.0.2"), ep("db", "10.0.0.3")},
		[]*federationpb.Workload{wl("u1", "10.0.0.1"), wl("u2", "10.0.0.2")})
	delta := func(edit func(u *federationpb.ShardUpdate)) *federationpb.ShardUpdate {
		u := &federationpb.ShardUpdate{Version: 2}
		edit(u)
		return u
	}
	type want struct {
		services, workloads []string
		clusters, all       bool
		endpoints           int
	}
	for _, tc := range []struct {
		name   string
		update *federationpb.ShardUpdate
		want   want
	}{
		{"the same full state", full("east", "n1", 2, base.Services, base.Endpoints, base.Workloads), want{endpoints: 3}},
		{
			"a full state without db", full("east", "n1", 2, base.Services[:1], base.Endpoints[:2], base.Workloads),
			want{services: []string{"demo/db"}, endpoints: 2},
		},
		{
			"a full state on another network", full("east", "n2", 2, base.Services, base.Endpoints, base.Workloads),
			want{clusters: true, all: true, endpoints: 3},
		},
		{
			"an endpoint added", delta(func(u *federationpb.ShardUpdate) { u.Endpoints = []*federationpb.Endpoint{ep("db", "10.0.0.4")} }),
			want{services: []string{"demo/db"}, endpoints: 4},
		},
		{
			"an endpoint not ready", delta(func(u *federationpb.ShardUpdate) {
				e := ep("echo", "10.0.0.1")
				e.Ready = false
				u.Endpoints = []*federationpb.Endpoint{e}
			}),
			want{services: []string{"demo/echo"}, endpoints: 3},
		},
		{
			"an endpoint as it is", delta(func(u *federationpb.ShardUpdate) { u.Endpoints = []*federationpb.Endpoint{ep("echo", "10.0.0.1")} }),
			want{endpoints: 3},
		},
		{
			"an unknown endpoint removed", delta(func(u *federationpb.ShardUpdate) { u.RemovedEndpoints = []string{"demo/echo/10.9.9.9"} }),
			want{endpoints: 3},
		},
		{
			"an endpoint removed", delta(func(u *federationpb.ShardUpdate) { u.RemovedEndpoints = []string{"demo/echo/10.0.0.2"} }),
			want{services: []string{"demo/echo"}, endpoints: 2},
		},
		{
			"a workload changed and one as it is", delta(func(u *federationpb.ShardUpdate) {
				u.Workloads = []*federationpb.Workload{wl("u1", "10.0.0.9"), wl("u2", "10.0.0.2")}
			}),
			want{workloads: []string{"u1"}, endpoints: 3},
		},
		{
			"a service removed", delta(func(u *federationpb.ShardUpdate) { u.RemovedServices = []string{"demo/db", "demo/none"} }),
			want{services: []string{"demo/db"}, endpoints: 3},
		},
		{
			"the cluster's network in a delta", delta(func(u *federationpb.ShardUpdate) { u.Cluster = &federationpb.Cluster{Id: "east", Network: "n2"} }),
			want{clusters: true, all: true, endpoints: 3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newShard("east")
			s.replace(base)
			var ch changeSet
			if tc.update.GetFull() {
				ch = s.replace(tc.update)
			} else {
				ch = s.patch(tc.update)
			}
			got := want{
				services: slices.Sorted(maps.Keys(ch.services)), workloads: slices.Sorted(maps.Keys(ch.workloads)),
				clusters: ch.clusters, all: ch.all, endpoints: s.nEndpoint,
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}
