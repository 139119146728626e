package adspb_test

import (
	"testing"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshfed/meshfed/internal/adspb"
)

func node() *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{"CLUSTER_ID": "west", "NETWORK": "net-1", "n": 3.0})
	return &corev3.Node{
		Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Cluster: "a.ns", Metadata: meta,
		Locality:             &corev3.Locality{Region: "r", Zone: "z", SubZone: "s"},
		UserAgentName:        "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.36"},
		ClientFeatures:       []string{"envoy.lb.does_not_support_overprovisioning"},
		// Read by no one here: kept as unknown fields.
		Extensions:        []*corev3.Extension{{Name: "x", Category: "c"}},
		DynamicParameters: map[string]*xdscorev3.ContextParams{"k": {Params: map[string]string{"a": "b"}}},
	}
}

func nack() *status.Status {
	return &status.Status{Code: 3, Message: "rejected", Details: []*anypb.Any{{TypeUrl: "t", Value: []byte{1}}}}
}

// TestWireCompatible: every message decodes Envoy's encoding of the same
// message, reads the fields the hub reads, and encodes back to a message
// Envoy's types read as the original (what it does not declare included).
func TestWireCompatible(t *testing.T) {
	any1 := &anypb.Any{TypeUrl: "type.googleapis.com/x", Value: []byte("v")}
	for _, tc := range []struct {
		envoy, ours proto.Message
		check       func(t *testing.T, m proto.Message)
	}{{
		envoy: &discovery.DiscoveryRequest{
			VersionInfo: "v1", Node: node(), ResourceNames: []string{"a", "b"}, TypeUrl: "t", ResponseNonce: "7", ErrorDetail: nack(),
			ResourceLocators: []*discovery.ResourceLocator{{Name: "a"}},
		},
		ours: &adspb.DiscoveryRequest{},
		check: func(t *testing.T, m proto.Message) {
			t.Helper()
			r := m.(*adspb.DiscoveryRequest)
			n := r.GetNode()
			if r.GetVersionInfo() != "v1" || len(r.GetResourceNames()) != 2 || r.GetTypeUrl() != "t" || r.GetResponseNonce() != "7" ||
				r.GetErrorDetail().GetMessage() != "rejected" || r.GetErrorDetail().GetCode() != 3 ||
				n.GetId() != node().GetId() || n.GetCluster() != "a.ns" || n.GetMetadata().GetFields()["NETWORK"].GetStringValue() != "net-1" ||
				n.GetLocality().GetSubZone() != "s" || n.GetUserAgentName() != "envoy" || n.GetUserAgentVersion() != "1.36" || len(n.GetClientFeatures()) != 1 {
				t.Errorf("read %v", r)
			}
		},
	}, {
		envoy: &discovery.DiscoveryResponse{VersionInfo: "v", Resources: []*anypb.Any{any1, any1}, TypeUrl: "t", Nonce: "1", Canary: true},
		ours:  &adspb.DiscoveryResponse{},
		check: func(t *testing.T, m proto.Message) {
			t.Helper()
			if r := m.(*adspb.DiscoveryResponse); len(r.GetResources()) != 2 || r.GetNonce() != "1" || r.GetVersionInfo() != "v" {
				t.Errorf("read %v", r)
			}
		},
	}, {
		envoy: &discovery.DeltaDiscoveryRequest{
			Node: node(), TypeUrl: "t", ResourceNamesSubscribe: []string{"a"}, ResourceNamesUnsubscribe: []string{"b", "c"},
			InitialResourceVersions: map[string]string{"a": "1", "d": "2"}, ResponseNonce: "5", ErrorDetail: nack(),
		},
		ours: &adspb.DeltaDiscoveryRequest{},
		check: func(t *testing.T, m proto.Message) {
			t.Helper()
			r := m.(*adspb.DeltaDiscoveryRequest)
			if r.GetNode().GetId() == "" || r.GetTypeUrl() != "t" || len(r.GetResourceNamesSubscribe()) != 1 || len(r.GetResourceNamesUnsubscribe()) != 2 ||
				r.GetInitialResourceVersions()["d"] != "2" || r.GetResponseNonce() != "5" || r.GetErrorDetail().GetCode() != 3 {
				t.Errorf("read %v", r)
			}
		},
	}, {
		envoy: &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: "s", TypeUrl: "t", Nonce: "n", RemovedResources: []string{"x"},
			Resources: []*discovery.Resource{{Name: "a", Version: "1", Resource: any1, Ttl: durationpb.New(1)}},
		},
		ours: &adspb.DeltaDiscoveryResponse{},
		check: func(t *testing.T, m proto.Message) {
			t.Helper()
			r := m.(*adspb.DeltaDiscoveryResponse)
			if r.GetSystemVersionInfo() != "s" || r.GetNonce() != "n" || len(r.GetRemovedResources()) != 1 ||
				r.GetResources()[0].GetName() != "a" || r.GetResources()[0].GetVersion() != "1" || !proto.Equal(r.GetResources()[0].GetResource(), any1) {
				t.Errorf("read %v", r)
			}
		},
	}} {
		t.Run(string(tc.ours.ProtoReflect().Descriptor().Name()), func(t *testing.T) {
			b, err := proto.Marshal(tc.envoy)
			if err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(b, tc.ours); err != nil {
				t.Fatalf("decoding Envoy's encoding: %v", err)
			}
			tc.check(t, tc.ours)
			back, err := proto.Marshal(tc.ours)
			if err != nil {
				t.Fatal(err)
			}
			got := tc.envoy.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(back, got); err != nil {
				t.Fatalf("Envoy's types decoding ours: %v", err)
			}
			if !proto.Equal(got, tc.envoy) {
				t.Errorf("round trip through ours:\n got %v\nwant %v", got, tc.envoy)
			}
		})
	}
}

// TestNamesAreEnvoys: the field names match Envoy's, so that the JSON of a
// request (logs, debug pages) reads as Envoy's does.
func TestNamesAreEnvoys(t *testing.T) {
	for _, pair := range [][2]proto.Message{
		{&adspb.DiscoveryRequest{}, &discovery.DiscoveryRequest{}},
		{&adspb.DiscoveryResponse{}, &discovery.DiscoveryResponse{}},
		{&adspb.DeltaDiscoveryRequest{}, &discovery.DeltaDiscoveryRequest{}},
		{&adspb.DeltaDiscoveryResponse{}, &discovery.DeltaDiscoveryResponse{}},
		{&adspb.Resource{}, &discovery.Resource{}},
		{&adspb.Node{}, &corev3.Node{}},
		{&adspb.Locality{}, &corev3.Locality{}},
		{&adspb.Status{}, &status.Status{}},
	} {
		ours, theirs := pair[0].ProtoReflect().Descriptor(), pair[1].ProtoReflect().Descriptor()
		fields := ours.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			g := theirs.Fields().ByNumber(f.Number())
			if g == nil || g.Name() != f.Name() || g.Kind() != f.Kind() || g.Cardinality() != f.Cardinality() {
				t.Errorf("%s.%s (%d): Envoy's %s has %v", ours.Name(), f.Name(), f.Number(), theirs.FullName(), g)
			}
		}
	}
}

// TestServiceNameIsEnvoys: proxies call the service by Envoy's name.
func TestServiceNameIsEnvoys(t *testing.T) {
	if want := discovery.AggregatedDiscoveryService_ServiceDesc.ServiceName; adspb.ServiceName != want {
		t.Errorf("service %q, want %q", adspb.ServiceName, want)
	}
}
