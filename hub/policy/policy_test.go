package policy_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation"
	pb "github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/policy"
)

const example = `
clusters:
- id: east
  networks: [network-east]
  exportNamespaces: [shop, default]
  cidrs:
    endpoints: [10.1.0.0/16, "fd00:1::/64"]
    workloads: [10.1.0.0/16]
    gateways: [203.0.113.0/24]
  limits: {maxEndpoints: 5000}
  leases: {staleAfter: 1m, withdrawAfter: 1h}
- id: west
  networks: [network-west, network-west-2]
  trustDomains: [west.example]
  gatewayNamespaces: [istio-system, gateways]
`

func TestParse(t *testing.T) {
	p, err := policy.Parse([]byte(example), "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]federation.ClusterID{"east", "west"}, p.Clusters()); diff != "" {
		t.Errorf("Clusters() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cluster.local", "west.example"}, p.TrustDomains()); diff != "" {
		t.Errorf("TrustDomains() (-want +got):\n%s", diff)
	}
	east := p.Cluster("east")
	five := 5000
	want := &policy.Cluster{
		ID:                "east",
		Networks:          []string{"network-east"},
		TrustDomains:      []string{"cluster.local"},
		ExportNamespaces:  []string{"shop", "default"},
		GatewayNamespaces: []string{"istio-system"},
		EndpointCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00:1::/64")},
		WorkloadCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		GatewayCIDRs:      []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
		Limits:            policy.Limits{MaxEndpoints: &five},
		Leases: policy.Leases{
			StaleAfter:    &policy.Duration{Duration: time.Minute},
			WithdrawAfter: &policy.Duration{Duration: time.Hour},
		},
	}
	if diff := cmp.Diff(want, east, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("Cluster(east) (-want +got):\n%s", diff)
	}
	if p.Cluster("north") != nil {
		t.Error("Cluster(north) is not nil for a cluster the file does not name")
	}
	west := p.Cluster("west")
	if west.ExportNamespaces != nil || west.EndpointCIDRs != nil {
		t.Errorf("west: left-out lists must admit everything, got exports %v, endpoint CIDRs %v", west.ExportNamespaces, west.EndpointCIDRs)
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"not YAML", "clusters: [", "policy file"},
		{"unknown field", "clusters:\n- id: east\n  networks: [n]\n  gatewayNamespace: [x]\n", `unknown field "gatewayNamespace"`},
		{"no clusters key", "cluster:\n- id: east\n", `unknown field "cluster"`},
		{"empty list", "clusters: []\n", ""},
		{"empty file", " \n", "is empty"},
		{"null list", "clusters:\n", "no clusters"},
		{"bad id", "clusters:\n- id: East_1\n  networks: [n]\n", `clusters[0] ("East_1"): id:`},
		{"duplicate", "clusters:\n- id: east\n  networks: [n]\n- id: east\n  networks: [n]\n", "listed twice"},
		{"no network", "clusters:\n- id: east\n", "networks: at least one"},
		{"bad network", "clusters:\n- id: east\n  networks: [\"a b\"]\n", "networks[0]"},
		{"bad namespace", "clusters:\n- id: east\n  networks: [n]\n  gatewayNamespaces: [Istio]\n", "gatewayNamespaces[0]"},
		{"bad trust domain", "clusters:\n- id: east\n  networks: [n]\n  trustDomains: [\"spiffe://x\"]\n", "trustDomains[0]"},
		{"bad CIDR", "clusters:\n- id: east\n  networks: [n]\n  cidrs: {endpoints: [10.0.0.0/33]}\n", "cidrs.endpoints[0]"},
		{"host bits", "clusters:\n- id: east\n  networks: [n]\n  cidrs: {gateways: [10.0.0.1/8]}\n", "did you mean 10.0.0.0/8"},
		{"negative cap", "clusters:\n- id: east\n  networks: [n]\n  limits: {maxServices: -1}\n", "limits.maxServices"},
		{"bad duration", "clusters:\n- id: east\n  networks: [n]\n  leases: {staleAfter: soon}\n", "soon"},
		{"negative duration", "clusters:\n- id: east\n  networks: [n]\n  leases: {staleAfter: -1s}\n", "negative"},
		{"withdraw before stale", "clusters:\n- id: east\n  networks: [n]\n  leases: {staleAfter: 1m, withdrawAfter: 30s}\n", "comes before"},
		{"too big", "#" + strings.Repeat("x", policy.MaxFileBytes) + "\n", "bytes is more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.file), "cluster.local")
			if tt.want == "" { // valid, but admits no cluster
				if err != nil || len(p.Clusters()) != 0 {
					t.Fatalf("Parse() = %v, %v; want an empty policy", p, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse() accepted %q", tt.file)
			}
			if !errors.Is(err, federation.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() error = %v; want one wrapping ErrInvalid and containing %q", err, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	p, err := policy.Parse([]byte(example), "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	east, west := p.Cluster("east"), p.Cluster("west")
	gw := func(addr, network, svc string) *pb.Gateway {
		return &pb.Gateway{Address: addr, Port: 15443, Protocol: pb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, Network: network, Service: svc}
	}
	eastCluster := func(gws ...*pb.Gateway) *pb.ShardUpdate {
		return &pb.ShardUpdate{Full: true, Cluster: &pb.Cluster{Id: "east", Network: "network-east", Gateways: gws}}
	}
	ep := func(ns, addr, network string) *pb.ShardUpdate {
		return &pb.ShardUpdate{Endpoints: []*pb.Endpoint{{Namespace: ns, Service: "cart", Address: addr, Network: network}}}
	}
	tests := []struct {
		name      string
		c         *policy.Cluster
		u         *pb.ShardUpdate
		wantField string // "" allows the update
	}{
		{"own network", east, eastCluster(gw("203.0.113.7", "network-east", "istio-system/eastwest")), ""},
		{"another network", east, &pb.ShardUpdate{Cluster: &pb.Cluster{Id: "east", Network: "network-west"}}, "network"},
		{"unnamed network not listed", east, &pb.ShardUpdate{Cluster: &pb.Cluster{Id: "east"}}, "network"},
		{"trust domain", east, &pb.ShardUpdate{Cluster: &pb.Cluster{Id: "east", Network: "network-east", TrustDomain: "west.example"}}, "trustDomain"},
		{"gateway for another network", east, eastCluster(gw("203.0.113.7", "network-west", "istio-system/eastwest")), "gateways[0].network"},
		{"gateway outside its namespaces", east, eastCluster(gw("203.0.113.7", "network-east", "team-a/hijack")), "gateways[0].service"},
		{"gateway outside its CIDRs", east, eastCluster(gw("198.51.100.1", "network-east", "istio-system/eastwest")), "gateways[0].address"},
		{"gateway host name with CIDRs", east, eastCluster(gw("gw.example.com", "network-east", "istio-system/eastwest")), "gateways[0].address"},
		{"gateway host name without CIDRs", west, &pb.ShardUpdate{Cluster: &pb.Cluster{
			Id: "west", Network: "network-west", TrustDomain: "west.example",
			Gateways: []*pb.Gateway{gw("gw.example.com", "network-west-2", "gateways/eastwest")},
		}}, ""},
		{"endpoint", east, ep("shop", "10.1.2.3", ""), ""},
		{"endpoint IPv6", east, ep("shop", "fd00:1::5", ""), ""},
		{"endpoint in a namespace not exported", east, ep("kube-system", "10.1.2.3", ""), "namespace"},
		{"endpoint outside its CIDRs", east, ep("shop", "10.2.0.1", ""), "address"},
		{"endpoint on another network", east, ep("shop", "10.1.2.3", "network-west"), "network"},
		{"service in a namespace not exported", east, &pb.ShardUpdate{Services: []*pb.Service{{Namespace: "kube-system", Name: "dns"}}}, "namespace"},
		{"workload outside its CIDRs", east, &pb.ShardUpdate{Workloads: []*pb.Workload{{Uid: "u1", Namespace: "shop", Ips: []string{"10.1.0.9", "10.9.0.9"}}}}, "ips[1]"},
		{"workload on another network", west, &pb.ShardUpdate{Workloads: []*pb.Workload{{Uid: "u1", Network: "network-east", Ips: []string{"10.9.0.9"}}}}, "network"},
		{"removals always allowed", east, &pb.ShardUpdate{RemovedEndpoints: []string{"kube-system/dns/10.9.9.9"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Check(tt.u)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Check() = %v; want it allowed", err)
				}
				return
			}
			var verr *federation.ValidationError
			if !errors.As(err, &verr) || !errors.Is(err, federation.ErrNotAllowed) {
				t.Fatalf("Check() = %v; want a ValidationError wrapping ErrNotAllowed", err)
			}
			if verr.Field != tt.wantField {
				t.Errorf("Check() field = %q, want %q (%v)", verr.Field, tt.wantField, err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("clusters:\n- id: east\n  networks: [\"\"]\n"))
	f.Add([]byte("{\"clusters\": [{\"id\": \"a\", \"networks\": [\"n\"], \"cidrs\": {\"endpoints\": [\"::/0\"]}}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data, "cluster.local")
		if err != nil {
			if !errors.Is(err, federation.ErrInvalid) {
				t.Fatalf("Parse() error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// Whatever parses must be usable: every entry has a network, a
		// trust domain and a gateway namespace, and checking never panics.
		for _, id := range p.Clusters() {
			c := p.Cluster(id)
			if len(c.Networks) == 0 || len(c.TrustDomains) == 0 || len(c.GatewayNamespaces) == 0 {
				t.Fatalf("cluster %q parsed with an empty list: %+v", id, c)
			}
			_ = c.Check(&pb.ShardUpdate{
				Cluster:   &pb.Cluster{Id: string(id), Network: c.Networks[0]},
				Endpoints: []*pb.Endpoint{{Namespace: "a", Service: "b", Address: "10.0.0.1"}},
			})
		}
	})
}
