package hub

import (
	"errors"
	"net/url"
	"testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/hub/policy"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/xds"
)

func TestProxyAuthorizerUnderPolicy(t *testing.T) {
	p, err := policy.Parse([]byte(`
clusters:
- id: east
  networks: [n1]
- id: west
  networks: [n2]
  trustDomains: [west.example]
`), "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Config{})
	authorize := proxyAuthorizer("cluster.local", reg)
	id := func(s string) *url.URL { u, _ := url.Parse(s); return u }
	clusters := []*clusterset.ClusterInfo{{ID: "west", TrustDomain: "west.example"}}
	eastSA, westSA := id("spiffe://cluster.local/ns/a/sa/b"), id("spiffe://west.example/ns/a/sa/b")

	// Without a policy, the network is the proxy's word.
	if err := authorize(eastSA, xds.Proxy{ID: "p", Network: "n2"}, clusters); err != nil {
		t.Errorf("no policy: %v", err)
	}
	reg.SetPolicy(p)
	tests := []struct {
		name    string
		id      *url.URL
		proxy   xds.Proxy
		allowed bool
	}{
		{"east proxy on east's network", eastSA, xds.Proxy{ID: "p", Cluster: "east", Network: "n1"}, true},
		{"west proxy on west's network", westSA, xds.Proxy{ID: "p", Cluster: "west", Network: "n2"}, true},
		{"east proxy claiming west's network", eastSA, xds.Proxy{ID: "p", Cluster: "east", Network: "n2"}, false},
		{"no cluster named", eastSA, xds.Proxy{ID: "p", Network: "n1"}, false},
		{"a cluster the policy does not name", eastSA, xds.Proxy{ID: "p", Cluster: "north", Network: "n1"}, false},
		{"east identity claiming west", eastSA, xds.Proxy{ID: "p", Cluster: "west", Network: "n2"}, false},
		{"west identity claiming east", westSA, xds.Proxy{ID: "p", Cluster: "east", Network: "n1"}, false},
	}
	for _, tt := range tests {
		err := authorize(tt.id, tt.proxy, clusters)
		if (err == nil) != tt.allowed {
			t.Errorf("%s: authorize() = %v, want allowed %v", tt.name, err, tt.allowed)
		}
		if tt.name == "a cluster the policy does not name" && !errors.Is(err, xds.ErrClusterTrustDomain) {
			t.Errorf("%s: %v does not wrap ErrClusterTrustDomain", tt.name, err)
		}
	}
}
