package resources

import (
	"fmt"
	"testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// benchService is a service with 1,000 endpoints in each of 10 clusters,
// spread over 3 zones of 2 regions; clusters are paired onto networks
// (networks > 0) or all on one.
func benchService(networks int) (*clusterset.ServiceView, *clusterset.Gateways) {
	svc := baseService()
	var parts []clusterset.ClusterService
	var infos []*clusterset.ClusterInfo
	for c := range 10 {
		id := federation.ClusterID(fmt.Sprintf("c%d", c))
		network := federation.NetworkID("net-0")
		if networks > 0 {
			network = federation.NetworkID(fmt.Sprintf("net-%d", c%networks))
		}
		eps := make([]*federationpb.Endpoint, 0, 1000)
		for i := range 1000 {
			region := []string{"r1", "r2"}[c%2]
			eps = append(eps, pod(fmt.Sprintf("10.%d.%d.%d", c, i/250, i%250+1), region, fmt.Sprintf("z%d", i%3)))
		}
		parts = append(parts, export(id, network, svc, eps...))
		infos = append(infos, cluster(id, network,
			gateway(fmt.Sprintf("192.0.2.%d", 2*c+1), 15443, tls),
			gateway(fmt.Sprintf("192.0.2.%d", 2*c+2), 15443, tls)))
	}
	return merged(parts...), clusterset.NewGateways(infos)
}

// BenchmarkEncodeLoadAssignment times one service's assignment (10,000
// endpoints) for a proxy on one network, with the others behind gateways.
func BenchmarkEncodeLoadAssignment(b *testing.B) {
	for _, bc := range []struct {
		name     string
		networks int
	}{
		{"one-network", 0},
		{"five-networks", 5},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, gws := benchService(bc.networks)
			v := view("net-0", "r1", "z1", "")
			port := grpcPort()
			b.ReportAllocs()
			for b.Loop() {
				if len(EncodeLoadAssignment(s, s.Hostname, port, v, gws)) == 0 {
					b.Fatal("empty")
				}
			}
			b.ReportMetric(float64(s.EndpointCount())*float64(b.N)/b.Elapsed().Seconds(), "endpoints/s")
		})
	}
}
