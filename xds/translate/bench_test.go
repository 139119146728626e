package translate

import (
	"fmt"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/xdstest"
)

// benchClusterset is 20 clusters, each its own zone on one network, each
// exporting 10 services of 50 endpoints (each service from two
// clusters): 10,000 endpoints and their workloads. Its views are every
// zone's EDS and the network's addresses.
func benchClusterset() (*xdstest.Snapshot, []View) {
	const clusters, services, endpoints = 20, 10, 50
	c := xdstest.New()
	var views []View
	for i := range clusters {
		id := federation.ClusterID(fmt.Sprintf("c%02d", i))
		zone := resources.Locality{Region: "r1", Zone: fmt.Sprintf("z%02d", i)}
		c.SetCluster(clusterset.ClusterInfo{ID: id, Network: "n1", TrustDomain: "cluster.local"})
		views = append(views, ViewFor(resourcev3.EndpointType, resources.View{Network: "n1", Locality: zone}))
		for s := range services {
			svc := echo()
			svc.Name = fmt.Sprintf("svc-%02d", (i/2*services+s)%(clusters/2*services))
			svc.Hostname = svc.Name + ".demo.svc.cluster.local"
			var eps []*federationpb.Endpoint
			for e := range endpoints {
				p := pod{fmt.Sprintf("%s-%s-%d", id, svc.Name, e), fmt.Sprintf("10.%d.%d.%d", i, s, e+1), zone.Region, zone.Zone}
				ep := p.endpoint()
				ep.Service = svc.Name
				eps = append(eps, ep)
				c.SetWorkload(id, p.workload())
			}
			c.SetService(id, svc, eps...)
		}
	}
	views = append(views, ViewFor(AddressType, resources.View{Network: "n1"}))
	return c.Publish(), views
}

// BenchmarkTranslateFirstPush: a hub's first push (its start, a
// restart), every view already in use: CDS, LDS, RDS, every zone's EDS and
// the network's workload API, built whole.
func BenchmarkTranslateFirstPush(b *testing.B) {
	snap, views := benchClusterset()
	b.ReportAllocs()
	for b.Loop() {
		if err := New("cluster.local").Translate(snap, clusterset.Changes{}, views, func(SetUpdate) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranslateLateViews: the views of proxies that connect after the
// first push, one call each, as the push loop makes them.
func BenchmarkTranslateLateViews(b *testing.B) {
	snap, views := benchClusterset()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		tr := New("cluster.local")
		if err := tr.Translate(snap, clusterset.Changes{}, views[len(views)-1:], func(SetUpdate) {}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i := range len(views) - 1 {
			if err := tr.Translate(snap, clusterset.Changes{}, append(views[:i+1:i+1], views[len(views)-1]), func(SetUpdate) {}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
