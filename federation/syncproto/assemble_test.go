package syncproto

import (
	"testing"

	"github.com/meshfed/meshfed/federation/federationpb"
)

func chunkOf(version uint64, more bool, addrs ...string) *federationpb.ShardUpdate {
	u := &federationpb.ShardUpdate{Version: version, Nonce: "n", More: more}
	for _, a := range addrs {
		u.Endpoints = append(u.Endpoints, &federationpb.Endpoint{Namespace: "demo", Service: "echo", Address: a})
	}
	return u
}

func TestSyncAssemblerJoinsChunks(t *testing.T) {
	var a assembler
	first := chunkOf(1, true, "10.0.0.1")
	first.Cluster = &federationpb.Cluster{Id: "east"}
	for _, c := range []*federationpb.ShardUpdate{first, chunkOf(1, true, "10.0.0.2")} {
		if u, n := a.add(c); u != nil || n != nil {
			t.Fatalf("a chunk with more set gave %v, %v", u, n)
		}
	}
	last := chunkOf(1, false, "10.0.0.3")
	last.RemovedServices = []string{"demo/gone"}
	u, n := a.add(last)
	if n != nil || u == nil || u.GetMore() || u.GetCluster().GetId() != "east" || len(u.GetEndpoints()) != 3 || len(u.GetRemovedServices()) != 1 {
		t.Fatalf("assembled %v, %v; want the three chunks' objects as one update", u, n)
	}
	if u, n := a.add(chunkOf(2, false, "10.0.0.4")); n != nil || len(u.GetEndpoints()) != 1 {
		t.Fatalf("the next version gave %v, %v", u, n)
	}
}

func TestSyncAssemblerRejects(t *testing.T) {
	t.Run("interleaved versions", func(t *testing.T) {
		var a assembler
		a.add(chunkOf(1, true, "10.0.0.1"))
		u, n := a.add(chunkOf(2, false, "10.0.0.2"))
		if u != nil || n.GetCode() != federationpb.NackCode_NACK_CODE_UNSPECIFIED || n.GetVersion() != 1 {
			t.Fatalf("got %v, %v; want a stream-ending nack of version 1", u, n)
		}
	})
	t.Run("a chunk twice", func(t *testing.T) {
		var a assembler
		a.add(chunkOf(1, true, "10.0.0.1"))
		a.add(chunkOf(1, true, "10.0.0.2"))
		u, n := a.add(chunkOf(1, true, "10.0.0.2"))
		if u != nil || n.GetCode() != federationpb.NackCode_NACK_CODE_UNSPECIFIED || n.GetVersion() != 1 {
			t.Fatalf("got %v, %v; want a stream-ending nack of version 1", u, n)
		}
	})
	t.Run("over the bound", func(t *testing.T) {
		a := assembler{limits: Limits{MaxServices: 1, MaxEndpoints: 1, MaxWorkloads: 1}} // bound: 6 objects
		a.add(chunkOf(1, true, "10.0.0.1", "10.0.0.2", "10.0.0.3"))
		u, n := a.add(chunkOf(1, true, "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7"))
		if u != nil || n.GetCode() != federationpb.NackCode_NACK_CODE_OVER_LIMIT || n.GetVersion() != 1 {
			t.Fatalf("got %v, %v; want an OVER_LIMIT nack of version 1", u, n)
		}
		// The rest of version 1 is dropped; version 2 is taken.
		if u, n := a.add(chunkOf(1, false, "10.0.0.8")); u != nil || n != nil {
			t.Fatalf("a dropped version's last chunk gave %v, %v", u, n)
		}
		if u, n := a.add(chunkOf(2, false, "10.0.0.1")); n != nil || len(u.GetEndpoints()) != 1 {
			t.Fatalf("the version after a dropped one gave %v, %v", u, n)
		}
	})
}

// TestImportsAssemblerJoinsChunks: a set's chunks join into one, the
// members' clusters included wherever a chunk carried them.
func TestImportsAssemblerJoinsChunks(t *testing.T) {
	var a importsAssembler
	chunks := []*federationpb.Imports{
		{Version: 3, Full: true, More: true, Network: "n1", Clusters: []*federationpb.Cluster{{Id: "east"}, {Id: "west"}}, Imports: []*federationpb.Import{{Namespace: "demo", Name: "a"}}},
		{Version: 3, Full: true, Imports: []*federationpb.Import{{Namespace: "demo", Name: "b"}}, Removed: []string{"demo/c"}},
	}
	if set, err := a.add(chunks[0]); set != nil || err != nil {
		t.Fatalf("the first chunk gave %v, %v", set, err)
	}
	set, err := a.add(chunks[1])
	if err != nil || set == nil || set.GetNetwork() != "n1" || len(set.GetImports()) != 2 || len(set.GetRemoved()) != 1 || len(set.GetClusters()) != 2 {
		t.Fatalf("assembled %v, %v; want both chunks' imports, the removal and the clusters", set, err)
	}
}
