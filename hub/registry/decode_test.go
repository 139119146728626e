package registry

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
)

// TestRegistryKeepsNothingOfTheReceiveBuffer applies updates decoded by
// syncproto.DecodeSpokeMessage, whose endpoints and workloads point into
// the bytes received, then overwrites those bytes: the registry must have
// kept copies, in every form it keeps (interned strings, localities and
// ports, with unknown fields or without, an endpoint's own node, hostname
// and workload reference), through a full update and a delta.
func TestRegistryKeepsNothingOfTheReceiveBuffer(t *testing.T) {
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	loc := func(zone string) *federationpb.Locality {
		return &federationpb.Locality{Region: "eu", Zone: zone, Subzone: "rack"}
	}
	locUnknown := loc("zone-u")
	locUnknown.ProtoReflect().SetUnknown(unknown)
	portUnknown := &federationpb.EndpointPort{Name: "admin", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9000, AppProtocol: "http"}
	portUnknown.ProtoReflect().SetUnknown(unknown)
	endpoint := func(addr, uid string, l *federationpb.Locality, ports ...*federationpb.EndpointPort) *federationpb.Endpoint {
		return &federationpb.Endpoint{
			Namespace: "demo", Service: "cart", Address: addr, Ports: ports, Ready: true, Node: "node-" + addr,
			Locality: l, Hostname: "host-" + strings.ReplaceAll(addr, ".", "-"), Network: "net1",
			Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: "pod-" + addr, Uid: uid},
		}
	}
	grpcPort := &federationpb.EndpointPort{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, AppProtocol: "grpc", Port: 8080}
	workload := func(uid, ip, zone string) *federationpb.Workload {
		return &federationpb.Workload{
			Uid: uid, Namespace: "demo", Name: "pod-" + ip, Ips: []string{ip}, ServiceAccount: "cart", Node: "node-" + ip,
			Locality: loc(zone), App: "cart", Version: "v1", CanonicalName: "cart", CanonicalRevision: "v1", Network: "net1", Ready: true,
		}
	}
	updates := []*federationpb.ShardUpdate{
		full("east", "net1", 1, []*federationpb.Service{svc("cart")}, []*federationpb.Endpoint{
			endpoint("10.0.0.1", "u1", loc("zone-a"), grpcPort),              // its workload's: shares the workload's strings
			endpoint("10.0.0.2", "u-none", loc("zone-b"), grpcPort),          // no such workload: keeps its own
			endpoint("10.0.0.3", "u3", locUnknown, portUnknown),              // unknown fields: copies of their own
			endpoint("10.0.0.4", "u4", loc("zone-c"), portUnknown, grpcPort), // a second port list
		}, []*federationpb.Workload{workload("u1", "10.0.0.1", "zone-a"), workload("u3", "10.0.0.3", "zone-u"), workload("u4", "10.0.0.4", "zone-z")}),
		{
			Version: 2, Endpoints: []*federationpb.Endpoint{endpoint("10.0.0.5", "u5", loc("zone-d"), grpcPort)},
			Workloads: []*federationpb.Workload{workload("u5", "10.0.0.5", "zone-d")},
		},
	}
	decoded, safe := newTestRegistry(Limits{}), newTestRegistry(Limits{})
	decodedConn, safeConn := decoded.Connect("east", ""), safe.Connect("east", "")
	var buffers [][]byte
	for _, u := range updates {
		b, err := proto.Marshal(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: u}})
		if err != nil {
			t.Fatal(err)
		}
		m := &federationpb.SpokeMessage{}
		if err := syncproto.DecodeSpokeMessage(b, m); err != nil {
			t.Fatal(err)
		}
		if err := decodedConn.Apply("s", m.GetUpdate()); err != nil {
			t.Fatal(err)
		}
		if err := safeConn.Apply("s", proto.CloneOf(u)); err != nil {
			t.Fatal(err)
		}
		buffers = append(buffers, b)
	}
	want := registryDump(safe.Current())
	if n := strings.Count(want, "address:"); n != 5 {
		t.Fatalf("%d endpoints in the registry, want 5:\n%s", n, want)
	}
	if got := registryDump(decoded.Current()); got != want {
		t.Fatalf("decoded from the buffer:\n%s\nwant:\n%s", got, want)
	}
	for _, b := range buffers {
		for i := range b {
			b[i] = 'X'
		}
	}
	if got := registryDump(decoded.Current()); got != want {
		t.Errorf("after the receive buffers were overwritten:\n%s\nwant:\n%s", got, want)
	}
}

// registryDump is a snapshot's services, endpoints and workloads as text.
func registryDump(s clusterset.Snapshot) string {
	var b strings.Builder
	for _, v := range s.Services() {
		fmt.Fprintf(&b, "service %s\n", v.Key)
		for _, c := range v.Clusters {
			for _, e := range c.Endpoints {
				fmt.Fprintf(&b, "  %s %s\n", c.Cluster, prototext.Format(e.Proto())) // its locality and ports included
			}
		}
	}
	for _, w := range s.Workloads() {
		fmt.Fprintf(&b, "workload %s\n", prototext.Format(w.Proto()))
	}
	return b.String()
}
