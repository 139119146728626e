package federation

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/federationtest"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		check  func() error
		reason string // "" means valid; else a substring of the error
	}{
		{"valid service", func() error { return ValidateService(federationtest.Service()) }, ""},
		{"service hostname elsewhere", func() error {
			s := federationtest.Service()
			s.Hostname = "echo.other.svc.cluster.local"
			return ValidateService(s)
		}, `service demo/echo: hostname: "echo.other.svc.cluster.local" is not echo.demo.svc.<domain>`},
		{"service port out of range", func() error {
			s := federationtest.Service()
			s.Ports[0].Port = 0
			return ValidateService(s)
		}, "service demo/echo: ports[0].port: 0 is out of range 1-65535"},
		{"service duplicate port name", func() error {
			s := federationtest.Service()
			s.Ports = append(s.Ports, proto.CloneOf(s.Ports[0]))
			s.Ports[1].Port = 9090
			return ValidateService(s)
		}, `ports[1].name: duplicate port name "grpc"`},
		{"service unnamed port among several", func() error {
			s := federationtest.Service()
			s.Ports = append(s.Ports, &federationpb.ServicePort{Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090})
			return ValidateService(s)
		}, "ports[1].name: required when a service has several ports"},
		{"service without export source", func() error {
			s := federationtest.Service()
			s.Export = nil
			return ValidateService(s)
		}, "export.source: required"},
		{"headless with cluster IP", func() error {
			s := federationtest.Service()
			s.Type = federationpb.ServiceType_SERVICE_TYPE_HEADLESS
			s.ClusterIps = []string{"10.96.0.1"}
			return ValidateService(s)
		}, "a headless service has no cluster IPs"},
		{"service bad namespace", func() error {
			s := federationtest.Service()
			s.Namespace = "Demo"
			s.Hostname = "echo.Demo.svc.cluster.local"
			return ValidateService(s)
		}, "namespace"},
		{"service with every MCS property", func() error {
			s := federationtest.Service()
			s.SessionAffinity, s.SessionAffinityTimeoutSeconds = federationpb.SessionAffinity_SESSION_AFFINITY_CLIENT_IP, 10800
			s.InternalTrafficPolicy, s.TrafficDistribution = "Local", "PreferClose"
			s.IpFamilies = []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV6, federationpb.IPFamily_IP_FAMILY_IPV4}
			s.Export.Labels = []*federationpb.KeyValue{{Key: "app.kubernetes.io/part-of", Value: "shop"}, {Key: "tier", Value: "web"}}
			s.Export.Annotations = []*federationpb.KeyValue{{Key: "owner", Value: "team a, on call"}}
			return ValidateService(s)
		}, ""},
		{"service session affinity timeout over a day", func() error {
			s := federationtest.Service()
			s.SessionAffinityTimeoutSeconds = 86401
			return ValidateService(s)
		}, "sessionAffinityTimeoutSeconds: 86401 is more than 86400"},
		{"service unknown internal traffic policy", func() error {
			s := federationtest.Service()
			s.InternalTrafficPolicy = "Node"
			return ValidateService(s)
		}, `internalTrafficPolicy: "Node" is neither Cluster nor Local`},
		{"service duplicate IP family", func() error {
			s := federationtest.Service()
			s.IpFamilies = []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4, federationpb.IPFamily_IP_FAMILY_IPV4}
			return ValidateService(s)
		}, "ipFamilies[1]: duplicate IP family"},
		{"service unsorted exported labels", func() error {
			s := federationtest.Service()
			s.Export.Labels = []*federationpb.KeyValue{{Key: "tier", Value: "web"}, {Key: "app", Value: "x"}}
			return ValidateService(s)
		}, `export.labels[1].key: "app" is not after "tier"`},
		{"service exported label value invalid", func() error {
			s := federationtest.Service()
			s.Export.Labels = []*federationpb.KeyValue{{Key: "tier", Value: "not a label value"}}
			return ValidateService(s)
		}, "export.labels[0].value"},
		{"service exported annotations too large", func() error {
			s := federationtest.Service()
			s.Export.Annotations = []*federationpb.KeyValue{{Key: "big", Value: strings.Repeat("x", 17<<10)}}
			return ValidateService(s)
		}, "export.annotations: 17411 bytes is more than 16384"},
		{"valid endpoint", func() error { return ValidateEndpoint(federationtest.Endpoint()) }, ""},
		{"endpoint IPv6", func() error {
			e := federationtest.Endpoint()
			e.Address = "fd00::1"
			return ValidateEndpoint(e)
		}, ""},
		{"endpoint non-canonical IP", func() error {
			e := federationtest.Endpoint()
			e.Address = "fd00:0::1"
			return ValidateEndpoint(e)
		}, `endpoint demo/echo/fd00:0::1: address: "fd00:0::1" is not in canonical form "fd00::1"`},
		{"endpoint not an IP", func() error {
			e := federationtest.Endpoint()
			e.Address = "example.com"
			return ValidateEndpoint(e)
		}, `address: "example.com" is not an IP address`},
		{"endpoint unspecified", func() error {
			e := federationtest.Endpoint()
			e.Address = "0.0.0.0"
			return ValidateEndpoint(e)
		}, "not a unicast address"},
		{"endpoint bad zone label", func() error {
			e := federationtest.Endpoint()
			e.Locality.Zone = "us east"
			return ValidateEndpoint(e)
		}, "locality.zone"},
		{"endpoint unknown protocol", func() error {
			e := federationtest.Endpoint()
			e.Ports[0].Protocol = 42
			return ValidateEndpoint(e)
		}, "ports[0].protocol: unknown protocol 42"},
		{"valid workload", func() error { return ValidateWorkload(federationtest.Workload()) }, ""},
		{"workload without IPs", func() error {
			w := federationtest.Workload()
			w.Ips = nil
			return ValidateWorkload(w)
		}, "ips: 0 addresses"},
		{"workload uid with spaces", func() error {
			w := federationtest.Workload()
			w.Uid = "a b"
			return ValidateWorkload(w)
		}, "uid"},
		{"cluster bad ID", func() error { return ValidateCluster(&federationpb.Cluster{Id: "East_1"}) }, "cluster East_1: id"},
		{"cluster gateway without protocol", func() error {
			return ValidateCluster(&federationpb.Cluster{Id: "east", Gateways: []*federationpb.Gateway{{Address: "1.2.3.4", Port: 15443}}})
		}, "gateways[0].protocol"},
		{"cluster gateway by hostname", func() error {
			return ValidateCluster(&federationpb.Cluster{Id: "east", Gateways: []*federationpb.Gateway{{
				Address: "gw.example.com", Port: 15008, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE,
			}}})
		}, ""},
		{"update twice the same endpoint", func() error {
			return ValidateUpdate(&federationpb.ShardUpdate{Version: 1, Endpoints: []*federationpb.Endpoint{federationtest.Endpoint(), federationtest.Endpoint()}})
		}, "endpoint demo/echo/10.0.0.1: appears twice in one update"},
		{"update upsert and removal of one key", func() error {
			return ValidateUpdate(&federationpb.ShardUpdate{Version: 1, Endpoints: []*federationpb.Endpoint{federationtest.Endpoint()}, RemovedEndpoints: []string{"demo/echo/10.0.0.1"}})
		}, "appears twice"},
		{"update bad removal key", func() error {
			return ValidateUpdate(&federationpb.ShardUpdate{Version: 1, RemovedServices: []string{"demo"}})
		}, "service demo: removed: not a service key"},
		{"update version 0", func() error { return ValidateUpdate(&federationpb.ShardUpdate{}) }, "version: must be greater than 0"},
		// An update remembers its checks of repeated values: the second
		// endpoint's bad zone (the first's is good) and the workload's bad
		// second address must still be found and named.
		{"update second endpoint bad zone", func() error {
			a, b := federationtest.Endpoint(), federationtest.Endpoint()
			b.Address, b.Locality = "10.0.0.2", &federationpb.Locality{Region: a.GetLocality().GetRegion(), Zone: "us east"}
			return ValidateUpdate(&federationpb.ShardUpdate{Version: 1, Endpoints: []*federationpb.Endpoint{a, b}})
		}, "endpoint demo/echo/10.0.0.2: locality.zone"},
		{"update workload second address", func() error {
			w := federationtest.Workload()
			w.Ips = append(w.Ips, "10.0.0.256")
			return ValidateUpdate(&federationpb.ShardUpdate{Version: 1, Workloads: []*federationpb.Workload{w}})
		}, "ips[1]:"},
		{"update second port name", func() error {
			e := federationtest.Endpoint()
			e.Ports = append(e.Ports, &federationpb.EndpointPort{Name: "Bad_Name", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090})
			return ValidateUpdate(&federationpb.ShardUpdate{Version: 1, Endpoints: []*federationpb.Endpoint{e}})
		}, "ports[1].name:"},
		{"full update with removals", func() error {
			return ValidateUpdate(&federationpb.ShardUpdate{Version: 1, Full: true, RemovedWorkloads: []string{"x"}})
		}, "a full update has no removals"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check()
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %v, want one containing %q", err, tc.reason)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

// FuzzValidateUpdate decodes arbitrary bytes as an update: validation may
// reject them but must not panic.
func FuzzValidateUpdate(f *testing.F) {
	seed, _ := proto.Marshal(&federationpb.ShardUpdate{
		Version: 1, Full: true, Cluster: &federationpb.Cluster{Id: "east"},
		Services: []*federationpb.Service{federationtest.Service()}, Endpoints: []*federationpb.Endpoint{federationtest.Endpoint()},
		Workloads: []*federationpb.Workload{federationtest.Workload()},
	})
	f.Add(seed)
	f.Fuzz(func(_ *testing.T, data []byte) {
		var u federationpb.ShardUpdate
		if proto.Unmarshal(data, &u) != nil {
			return
		}
		_ = ValidateUpdate(&u)
	})
}
