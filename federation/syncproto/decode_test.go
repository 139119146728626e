package syncproto

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// decodeSamples are messages of every kind a spoke sends, an update with
// every field of its endpoints and workloads set among them.
func decodeSamples() map[string]*federationpb.SpokeMessage {
	loc := &federationpb.Locality{Region: "eu", Zone: "eu-1a", Subzone: "rack-3"}
	endpoint := &federationpb.Endpoint{
		Namespace: "shop", Service: "cart", Address: "10.1.0.7",
		Ports: []*federationpb.EndpointPort{
			{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, AppProtocol: "grpc", Port: 8080},
			{Name: "metrics", Port: 9090},
		},
		Ready: true, Serving: true, Terminating: true, Node: "node-1", Locality: loc,
		Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: "cart-0", Uid: "uid-1"},
		Hostname: "cart-0", Network: "net1",
	}
	workload := &federationpb.Workload{
		Uid: "uid-1", Namespace: "shop", Name: "cart-0", Ips: []string{"10.1.0.7", "fd00::7"},
		ServiceAccount: "cart", Node: "node-1", Locality: loc, App: "cart", Version: "v2",
		CanonicalName: "cart", CanonicalRevision: "v2", Network: "net1", Ready: true, Ambient: true, MeshTls: true,
	}
	update := &federationpb.ShardUpdate{
		Version: 7, Nonce: "n7", Full: true, More: true,
		Cluster:         &federationpb.Cluster{Id: "east", Network: "net1"},
		Services:        []*federationpb.Service{{Namespace: "shop", Name: "cart", Hostname: "cart.shop.svc.cluster.local"}},
		Endpoints:       []*federationpb.Endpoint{endpoint, {Namespace: "shop", Service: "cart", Address: "10.1.0.8"}},
		Workloads:       []*federationpb.Workload{workload, {Uid: "uid-2"}},
		RemovedServices: []string{"shop/old"}, RemovedEndpoints: []string{"shop/cart/10.1.0.9"}, RemovedWorkloads: []string{"uid-3"},
	}
	// Unknown fields, as a newer spoke would send them, at every level.
	withUnknown := proto.CloneOf(update)
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	withUnknown.Endpoints[0].ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 98, protowire.BytesType), "x"))
	withUnknown.Workloads[0].ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 97, protowire.BytesType), "y"))
	withUnknown.Endpoints[0].Ports[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 96, protowire.VarintType), 2))
	return map[string]*federationpb.SpokeMessage{
		"empty":          {},
		"hello":          {Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{ClusterId: "east", Session: "s", Members: []string{"east"}}}},
		"held":           {Kind: &federationpb.SpokeMessage_Held{Held: &federationpb.ImportsHeld{}}},
		"update":         {Kind: &federationpb.SpokeMessage_Update{Update: update}},
		"empty update":   {Kind: &federationpb.SpokeMessage_Update{Update: &federationpb.ShardUpdate{}}},
		"unknown fields": {Kind: &federationpb.SpokeMessage_Update{Update: withUnknown}},
	}
}

func TestDecodeSpokeMessageAsProtoUnmarshal(t *testing.T) {
	for name, msg := range decodeSamples() {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			got := &federationpb.SpokeMessage{}
			if err := DecodeSpokeMessage(b, got); err != nil {
				t.Fatalf("DecodeSpokeMessage: %v", err)
			}
			if !proto.Equal(got, msg) {
				t.Errorf("DecodeSpokeMessage = %v, want %v", got, msg)
			}
			// An update's messages decoded into the same message as before
			// leave nothing of the earlier one.
			if err := DecodeSpokeMessage(b, got); err != nil || !proto.Equal(got, msg) {
				t.Errorf("decoded twice: %v, %v", got, err)
			}
		})
	}
	// Trailing fields after the update, or the update twice, go to the
	// ordinary decoder: proto's rules (the last of a oneof wins) stay.
	b, _ := proto.Marshal(decodeSamples()["update"])
	hello, _ := proto.Marshal(decodeSamples()["hello"])
	for name, in := range map[string][]byte{"update then hello": append(append([]byte(nil), b...), hello...), "update twice": append(append([]byte(nil), b...), b...)} {
		want, got := &federationpb.SpokeMessage{}, &federationpb.SpokeMessage{}
		if err := proto.Unmarshal(in, want); err != nil {
			t.Fatal(err)
		}
		if err := DecodeSpokeMessage(in, got); err != nil || !proto.Equal(got, want) {
			t.Errorf("%s: DecodeSpokeMessage = %v, %v; want %v", name, got, err, want)
		}
	}
}

func TestDecodeSpokeMessageStringsPointIntoTheBuffer(t *testing.T) {
	b, err := proto.Marshal(decodeSamples()["update"])
	if err != nil {
		t.Fatal(err)
	}
	m := &federationpb.SpokeMessage{}
	if err := DecodeSpokeMessage(b, m); err != nil {
		t.Fatal(err)
	}
	ns := m.GetUpdate().GetEndpoints()[0].GetNamespace()
	svc := m.GetUpdate().GetServices()[0].GetNamespace()
	clear(b)
	if ns == "shop" {
		t.Errorf("an endpoint's namespace was copied out of the buffer")
	}
	if svc != "shop" {
		t.Errorf("a service's namespace points into the buffer: %q after the buffer was cleared", svc)
	}
}

// TestDecodeSpokeMessageRefusesInvalidUTF8 sets each string of an
// endpoint and of a workload (their nested messages' too, found by
// reflection, so that a field added later is covered) to invalid UTF-8:
// proto.Unmarshal refuses every one, and so must DecodeSpokeMessage.
func TestDecodeSpokeMessageRefusesInvalidUTF8(t *testing.T) {
	update := decodeSamples()["update"].GetUpdate()
	for _, obj := range []proto.Message{update.GetEndpoints()[0], update.GetWorkloads()[0]} {
		for _, path := range stringFields(obj.ProtoReflect().Descriptor(), nil) {
			t.Run(string(obj.ProtoReflect().Descriptor().Name())+"."+pathName(path), func(t *testing.T) {
				bad := proto.CloneOf(update)
				target := bad.GetEndpoints()[0].ProtoReflect()
				if _, ok := obj.(*federationpb.Workload); ok {
					target = bad.GetWorkloads()[0].ProtoReflect()
				}
				// proto.Marshal refuses invalid UTF-8: a marker found nowhere
				// else in the encoding, replaced after.
				setString(target, path, "~#~")
				b, err := proto.Marshal(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: bad}})
				if err != nil {
					t.Fatal(err)
				}
				if n := bytes.Count(b, []byte("~#~")); n != 1 {
					t.Fatalf("the marker is %d bytes of the encoding, want 1", n)
				}
				b = bytes.ReplaceAll(b, []byte("~#~"), []byte("\xff\xfe\xff"))
				if err := proto.Unmarshal(b, &federationpb.SpokeMessage{}); err == nil {
					t.Fatal("proto.Unmarshal accepted it")
				}
				if err := DecodeSpokeMessage(b, &federationpb.SpokeMessage{}); err == nil {
					t.Errorf("DecodeSpokeMessage accepted invalid UTF-8 in %s", pathName(path))
				}
			})
		}
	}
}

// stringFields lists the paths to every string field of md, through its
// message fields.
func stringFields(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor {
	var out [][]protoreflect.FieldDescriptor
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		path := append(append([]protoreflect.FieldDescriptor(nil), prefix...), f)
		switch f.Kind() {
		case protoreflect.StringKind:
			out = append(out, path)
		case protoreflect.MessageKind:
			out = append(out, stringFields(f.Message(), path)...)
		}
	}
	return out
}

func pathName(path []protoreflect.FieldDescriptor) string {
	var s string
	for i, f := range path {
		if i > 0 {
			s += "."
		}
		s += string(f.Name())
	}
	return s
}

// setString sets the string at path in m to v: in the first element of a
// list, which is made when empty.
func setString(m protoreflect.Message, path []protoreflect.FieldDescriptor, v string) {
	f := path[0]
	if len(path) == 1 {
		if f.IsList() {
			l := m.Mutable(f).List()
			if l.Len() == 0 {
				l.Append(protoreflect.ValueOfString(v))
			} else {
				l.Set(0, protoreflect.ValueOfString(v))
			}
			return
		}
		m.Set(f, protoreflect.ValueOfString(v))
		return
	}
	var next protoreflect.Message
	if f.IsList() {
		l := m.Mutable(f).List()
		if l.Len() == 0 {
			l.Append(l.NewElement())
		}
		next = l.Get(0).Message()
	} else {
		next = m.Mutable(f).Message()
	}
	setString(next, path[1:], v)
}

// FuzzDecodeSpokeMessage checks DecodeSpokeMessage against proto.Unmarshal
// on any input: where both accept it, they decode the same; what it
// accepts is valid (proto.Marshal, which checks UTF-8, takes it). The two
// may differ in what they refuse: UnmarshalVTUnsafe refuses a known field
// of the wrong wire type, which proto.Unmarshal keeps as an unknown field,
// and proto.Unmarshal refuses invalid UTF-8 in a field the same message
// sets again later, where only the last value counts. No spoke sends
// either.
func FuzzDecodeSpokeMessage(f *testing.F) {
	for _, m := range decodeSamples() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := &federationpb.SpokeMessage{}, &federationpb.SpokeMessage{}
		if err := DecodeSpokeMessage(append([]byte(nil), b...), got); err != nil {
			return
		}
		if _, err := proto.Marshal(got); err != nil {
			t.Fatalf("DecodeSpokeMessage accepted what does not encode again (%v): %v", err, got)
		}
		if err := proto.Unmarshal(b, want); err == nil && !proto.Equal(got, want) {
			t.Fatalf("DecodeSpokeMessage = %v, proto.Unmarshal = %v", got, want)
		}
	})
}

// BenchmarkDecodeSpokeMessage decodes a full update of 10,000 endpoints
// and their workloads, as a spoke's initial sync sends them.
func BenchmarkDecodeSpokeMessage(b *testing.B) {
	u := &federationpb.ShardUpdate{Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: "east", Network: "net1"}}
	loc := &federationpb.Locality{Region: "eu", Zone: "eu-1a"}
	for i := range 10_000 {
		ip, uid := fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff), fmt.Sprintf("0b8f6c1e-3f7a-4e2b-9d55-%012d", i)
		u.Endpoints = append(u.Endpoints, &federationpb.Endpoint{
			Namespace: "shop", Service: fmt.Sprintf("svc-%d", i/20), Address: ip, Ready: true, Node: fmt.Sprintf("node-%d", i%50), Locality: loc,
			Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
			Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: fmt.Sprintf("svc-%d-7d9f8-%05d", i/20, i), Uid: uid},
		})
		u.Workloads = append(u.Workloads, &federationpb.Workload{
			Uid: uid, Namespace: "shop", Name: fmt.Sprintf("svc-%d-7d9f8-%05d", i/20, i), Ips: []string{ip}, ServiceAccount: "default",
			Node: fmt.Sprintf("node-%d", i%50), Locality: loc, App: fmt.Sprintf("svc-%d", i/20), Ready: true,
		})
	}
	data, err := proto.Marshal(&federationpb.SpokeMessage{Kind: &federationpb.SpokeMessage_Update{Update: u}})
	if err != nil {
		b.Fatal(err)
	}
	for name, decode := range map[string]func([]byte, *federationpb.SpokeMessage) error{
		"proto.Unmarshal":    func(b []byte, m *federationpb.SpokeMessage) error { return proto.Unmarshal(b, m) },
		"DecodeSpokeMessage": DecodeSpokeMessage,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := decode(data, &federationpb.SpokeMessage{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
