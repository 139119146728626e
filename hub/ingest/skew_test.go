package ingest

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/syncproto"
	"github.com/meshfed/meshfed/hub/registry"
)

var updateFixture = flag.Bool("update-fixture", false, "rewrite testdata/spoke-v1-unversioned.binpb (never for a released version: it must stay what that version sent)")

// fixtureSpokeV1 is what a spoke from before the protocol had versions
// sent on a new stream: a Hello without protocol_version, then its full
// state. The bytes are checked in; this only writes them again.
func fixtureSpokeV1() []*federationpb.SpokeMessage {
	return []*federationpb.SpokeMessage{
		{Kind: &federationpb.SpokeMessage_Hello{Hello: &federationpb.Hello{
			ClusterId: "east", Session: "0f3c2a9b7d1e4c56", Build: "v0.1.0",
		}}},
		{Kind: &federationpb.SpokeMessage_Update{Update: &federationpb.ShardUpdate{
			Version: 1, Nonce: "1", Full: true,
			Cluster: &federationpb.Cluster{Id: "east", Network: "network-east"},
			Services: []*federationpb.Service{{
				Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local",
				Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
				Ports:  []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
				Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT},
			}},
			Endpoints: []*federationpb.Endpoint{{Namespace: "demo", Service: "echo", Address: "10.1.0.7", Ready: true, Serving: true}},
		}}},
	}
}

// readFixture reads length-delimited SpokeMessages.
func readFixture(t *testing.T, path string) []*federationpb.SpokeMessage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*federationpb.SpokeMessage
	for len(b) > 0 {
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			t.Fatalf("%s: %v", path, protowire.ParseError(n))
		}
		var msg federationpb.SpokeMessage
		if err := proto.Unmarshal(m, &msg); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, &msg)
		b = b[n:]
	}
	return out
}

// TestOldSpokeNewHub: this hub serves what a spoke of the oldest protocol
// it supports sent, byte for byte as that spoke sent it.
func TestOldSpokeNewHub(t *testing.T) {
	path := filepath.Join("testdata", "spoke-v1-unversioned.binpb")
	if *updateFixture {
		var b []byte
		for _, m := range fixtureSpokeV1() {
			enc, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			b = protowire.AppendBytes(b, enc)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	msgs := readFixture(t, path)
	if msgs[0].GetHello().GetProtocolVersion() != 0 {
		t.Fatal("the fixture's Hello carries a protocol version: it is not what an unversioned spoke sent")
	}
	reg := registry.New(registry.Config{})
	srv := NewServer(Config{MaxMessageBytes: 1 << 20, HubID: "test", Build: "new"}, reg, Insecure, nil, slog.New(slog.DiscardHandler))
	s, done := serve(t, srv, nil)
	s.in <- msgs[0]
	w := (<-s.out).GetWelcome()
	if w == nil || w.GetProtocolVersion() != 1 || w.GetBuild() != "new" {
		t.Fatalf("welcome %v; want one speaking protocol 1 with the hub's build", w)
	}
	for _, m := range msgs[1:] {
		s.in <- m
	}
	for {
		m := <-s.out
		if m.GetMembers() != nil {
			continue
		}
		if a := m.GetAck(); a == nil || a.GetVersion() != 1 {
			t.Fatalf("answer to the old spoke's full state: %v, want an Ack of version 1", m)
		}
		break
	}
	if v, ok := reg.Current().Service("demo/echo"); !ok || v.EndpointCount() != 1 {
		t.Errorf("the old spoke's echo: %+v", v)
	}
	var build string
	for _, st := range reg.Status() {
		build = st.Build
	}
	if build != "v0.1.0" {
		t.Errorf("status shows build %q, want the old spoke's v0.1.0", build)
	}
	s.cancel()
	_ = result(t, done)
	if syncproto.MinProtocolVersion > 1 {
		t.Error("this hub no longer serves protocol 1: move the fixture to the oldest version it serves")
	}
}
