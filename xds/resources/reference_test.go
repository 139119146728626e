package resources_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/resources/reference"
)

const tls = federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS

// TestEncodeLoadAssignment: the direct encoding decodes to the reference
// assignment, and is byte for byte its deterministic marshalling with each
// lb_endpoint's metadata moved last, over random service views.
func TestEncodeLoadAssignment(t *testing.T) {
	checked := 0
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b9))
		s, clusters, v := resources.RandomCase(r)
		gws := clusterset.NewGateways(clusters)
		for _, h := range resources.Hostnames(s) {
			for _, p := range s.Ports {
				want := reference.LoadAssignment(resources.Assignment(s, h, p, v, gws))
				got := resources.EncodeLoadAssignment(s, h, p, v, gws)
				var decoded endpointv3.ClusterLoadAssignment
				if err := proto.Unmarshal(got, &decoded); err != nil {
					t.Fatalf("seed %d: the encoding does not decode: %v", seed, err)
				}
				if !proto.Equal(&decoded, want) {
					t.Fatalf("seed %d: decodes to\n%v\nwant\n%v", seed, &decoded, want)
				}
				ref, err := proto.MarshalOptions{Deterministic: true}.Marshal(metadataLast(want))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, ref) {
					t.Fatalf("seed %d: bytes differ from the marshalled assignment", seed)
				}
				checked += len(want.GetEndpoints())
			}
		}
	}
	if checked < 300 {
		t.Errorf("only %d locality groups checked", checked)
	}
}

// metadataLast moves each lb_endpoint's metadata into its unknown fields,
// which marshalling writes after the known ones.
func metadataLast(cla *endpointv3.ClusterLoadAssignment) *endpointv3.ClusterLoadAssignment {
	const lbMetadata = 3 // LbEndpoint.metadata
	cla = proto.Clone(cla).(*endpointv3.ClusterLoadAssignment)
	for _, l := range cla.GetEndpoints() {
		for _, lb := range l.GetLbEndpoints() {
			if m := lb.GetMetadata(); m != nil {
				b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
				lb.Metadata = nil
				lb.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, lbMetadata, protowire.BytesType), b))
			}
		}
	}
	return cla
}

// TestEncodeServiceResources: EncodeClusters, EncodeListeners and
// EncodeRoutes write byte for byte the deterministic marshalling of the
// reference messages, in the same order and under their names, and the
// encodings decode to them; over the golden cases' services (several
// hostnames, several ports, ClusterSetIPs of both families, a family
// without one) and random ones with random ClusterSetIPs.
func TestEncodeServiceResources(t *testing.T) {
	services := resources.ServiceFixtures()
	for _, name := range slices.Sorted(maps.Keys(services)) {
		t.Run(name, func(t *testing.T) {
			checkServiceResources(t, services[name].Service, services[name].VIPs)
		})
	}
	ipSets := [][]netip.Addr{
		nil,
		{netip.MustParseAddr("240.242.0.7")},
		{netip.MustParseAddr("240.242.0.7"), netip.MustParseAddr("fd6d:6673:6574::7")},
		{{}, netip.MustParseAddr("fd6d:6673:6574::7")},
		{netip.MustParseAddr("240.242.1.200"), {}},
	}
	for seed := range uint64(200) {
		t.Run(fmt.Sprintf("random-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, seed*0x51))
			s, _, _ := resources.RandomCase(r)
			var vips []netip.Addr
			if s.ClustersetHostname != "" {
				vips = ipSets[r.IntN(len(ipSets))]
			}
			checkServiceResources(t, s, vips)
		})
	}
}

func checkServiceResources(t *testing.T, s *clusterset.ServiceView, vips []netip.Addr) {
	t.Helper()
	checkEncoded(t, "cluster", resources.EncodeClusters(s), reference.Clusters(s))
	checkEncoded(t, "listener", resources.EncodeListeners(s, vips), reference.Listeners(s, vips))
	checkEncoded(t, "route", resources.EncodeRoutes(s, vips), reference.Routes(s, vips))
}

func checkEncoded[M any, P interface {
	*M
	proto.Message
	GetName() string
}](t *testing.T, kind string, got []resources.Encoded, want []P) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d %ss encoded, the reference has %d", len(got), kind, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.GetName() {
			t.Errorf("%s %d is named %q, the reference's %q", kind, i, g.Name, w.GetName())
		}
		ref, err := proto.MarshalOptions{Deterministic: true}.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g.Value, ref) {
			t.Errorf("%s %s: bytes differ from the marshalled reference:\n got %x\nwant %x", kind, g.Name, g.Value, ref)
		}
		decoded := P(new(M))
		if err := proto.Unmarshal(g.Value, decoded); err != nil {
			t.Fatalf("%s %s: the encoding does not decode: %v", kind, g.Name, err)
		}
		if !proto.Equal(decoded, w) {
			t.Errorf("%s %s: decodes to\n%v\nwant\n%v", kind, g.Name, decoded, w)
		}
	}
}

// benchServiceView is an MCS import with both hostnames, four ports and
// ClusterSetIPs of both families: 8 clusters, 12 listeners and 8 route
// configurations.
func benchServiceView() (*clusterset.ServiceView, []netip.Addr) {
	return &clusterset.ServiceView{
		Hostname:           "echo.demo.svc.cluster.local",
		ClustersetHostname: "echo.demo.svc.clusterset.local",
		Ports: []*federationpb.ServicePort{
			{Name: "http", Port: 80},
			{Name: "https", Port: 443},
			{Name: "grpc", Port: 8080},
			{Name: "metrics", Port: 9100},
		},
	}, []netip.Addr{netip.MustParseAddr("240.242.0.5"), netip.MustParseAddr("fd6d:6673:6574::5")}
}

// BenchmarkEncodeServiceResources times a service's CDS, LDS and RDS:
// encoded directly, and, for comparison, built as messages and marshalled
// (what the hub did before it encoded them itself).
func BenchmarkEncodeServiceResources(b *testing.B) {
	s, vips := benchServiceView()
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(resources.EncodeClusters(s))+len(resources.EncodeListeners(s, vips))+len(resources.EncodeRoutes(s, vips)) == 0 {
				b.Fatal("empty")
			}
		}
	})
	b.Run("reference-marshal", func(b *testing.B) {
		b.ReportAllocs()
		opts := proto.MarshalOptions{Deterministic: true}
		for b.Loop() {
			var ms []proto.Message
			for _, m := range reference.Clusters(s) {
				ms = append(ms, m)
			}
			for _, m := range reference.Listeners(s, vips) {
				ms = append(ms, m)
			}
			for _, m := range reference.Routes(s, vips) {
				ms = append(ms, m)
			}
			for _, m := range ms {
				if _, err := opts.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
