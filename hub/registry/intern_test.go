package registry

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

func TestRegistrySharesEqualPartsOfMessages(t *testing.T) {
	r := newTestRegistry(Limits{})
	zone := func(z string) *federationpb.Locality { return &federationpb.Locality{Region: "r1", Zone: z} }
	port := func(n uint32) []*federationpb.EndpointPort {
		return []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: n}}
	}
	a, b, c, d := ep("echo", "10.0.0.1"), ep("echo", "10.0.0.2"), ep("echo", "10.0.0.3"), ep("echo", "10.0.0.4")
	a.Locality, b.Locality, c.Locality, d.Locality = zone("z1"), zone("z1"), zone("z2"), zone("z1")
	a.Ports, b.Ports, c.Ports, d.Ports = port(8080), port(8080), port(9090), port(8080)
	// d's locality carries a field this hub does not know: it keeps its own.
	d.Locality.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	w1, w2 := wl("u1", "10.0.0.1"), wl("u2", "10.0.0.2")
	w1.Locality, w2.Locality = zone("z1"), zone("z1")
	conn := r.Connect("east", "")
	if err := conn.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo")},
		[]*federationpb.Endpoint{a, b, c, d}, []*federationpb.Workload{w1, w2})); err != nil {
		t.Fatal(err)
	}
	v, _ := r.Current().Service("demo/echo")
	got := map[string]*clusterset.Endpoint{}
	for _, e := range v.Clusters[0].Endpoints {
		got[e.GetAddress()] = e.Endpoint
	}
	ga, gb, gc, gd := got["10.0.0.1"], got["10.0.0.2"], got["10.0.0.3"], got["10.0.0.4"]
	if ga.GetLocality() != gb.GetLocality() || &ga.GetPorts()[0] != &gb.GetPorts()[0] {
		t.Error("two endpoints with equal localities and ports hold two copies")
	}
	if ga.GetLocality() == gc.GetLocality() || gc.GetLocality().GetZone() != "z2" || gc.GetPorts()[0].GetPort() != 9090 {
		t.Errorf("different values were merged: %v %v", gc.GetLocality(), gc.GetPorts())
	}
	if gd.GetLocality() == ga.GetLocality() || len(gd.GetLocality().ProtoReflect().GetUnknown()) == 0 {
		t.Error("a locality with unknown fields was replaced by a shared one")
	}
	ws, _ := r.Current().Workload("east/u1")
	ws2, _ := r.Current().Workload("east/u2")
	if ws.GetLocality() != ws2.GetLocality() || ws.GetLocality() != ga.GetLocality() {
		t.Error("workloads do not share their cluster's locality")
	}

	// A delta is interned against what the shard holds.
	e := ep("echo", "10.0.0.5")
	e.Locality, e.Ports = zone("z1"), port(8080)
	if err := conn.Apply("s", &federationpb.ShardUpdate{Version: 2, Endpoints: []*federationpb.Endpoint{e}}); err != nil {
		t.Fatal(err)
	}
	v, _ = r.Current().Service("demo/echo")
	ge := v.Clusters[0].Endpoints[len(v.Clusters[0].Endpoints)-1]
	if ge.GetAddress() != "10.0.0.5" || ge.GetLocality() != ga.GetLocality() || &ge.GetPorts()[0] != &ga.GetPorts()[0] {
		t.Error("a delta's endpoint does not share the shard's locality and ports")
	}
}
