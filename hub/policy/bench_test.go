package policy_test

import (
	"fmt"
	"testing"

	pb "github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/policy"
)

// BenchmarkCheck is the policy's cost on a cluster's full state of 10,000
// endpoints with CIDRs and export namespaces to check: what the hub adds
// to applying that update.
func BenchmarkCheck(b *testing.B) {
	p, err := policy.Parse([]byte(example), "cluster.local")
	if err != nil {
		b.Fatal(err)
	}
	east := p.Cluster("east")
	u := &pb.ShardUpdate{Full: true, Cluster: &pb.Cluster{Id: "east", Network: "network-east"}}
	for i := range 10_000 {
		u.Endpoints = append(u.Endpoints, &pb.Endpoint{
			Namespace: "shop", Service: fmt.Sprintf("svc-%d", i/10), Address: fmt.Sprintf("10.1.%d.%d", i/250, i%250),
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := east.Check(u); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/endpoint")
}
