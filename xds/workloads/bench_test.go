package workloads

import (
	"fmt"
	"slices"
	"testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// benchFleet is a clusterset of 10 clusters, c0–c4 on net-0 and c5–c9 on
// net-1, each with an HBONE gateway, all exporting the same services
// demo/svc-0 … with perCluster ready ambient pods each: 10 × services ×
// perCluster workloads.
func benchFleet(services, perCluster int) *fakeSnapshot {
	f := &fakeSnapshot{services: map[string]*clusterset.ServiceView{}, workloads: map[string]clusterset.TaggedWorkload{}}
	for c := range 10 {
		f.clusters = append(f.clusters, &clusterset.ClusterInfo{
			ID: federation.ClusterID(fmt.Sprintf("c%d", c)), Network: federation.NetworkID(fmt.Sprintf("net-%d", c/5)), TrustDomain: "cluster.local",
			Gateways: []*federationpb.Gateway{{
				Address: fmt.Sprintf("192.0.2.%d", c+1), Port: 15008, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE,
				Service: "istio-system/istio-eastwestgateway",
			}},
		})
	}
	for s := range services {
		name := fmt.Sprintf("svc-%d", s)
		parts := make([]clusterset.ClusterService, 0, len(f.clusters))
		for c, info := range f.clusters {
			part := clusterset.ClusterService{Cluster: info.ID, Network: info.Network, Service: &federationpb.Service{
				Namespace: "demo", Name: name, Hostname: name + ".demo.svc.cluster.local",
				ClusterIps: []string{fmt.Sprintf("10.96.%d.%d", s/250, s%250+1)},
				Type:       federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
				Ports:      []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, TargetPort: 9090}},
				Export:     &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT},
			}}
			eps := make([]*federationpb.Endpoint, 0, perCluster)
			for i := range perCluster {
				n := s*perCluster + i
				pod := fmt.Sprintf("%s-%d", name, i)
				ip := fmt.Sprintf("10.%d.%d.%d", c, n/250, n%250+1)
				f.workloads[clusterset.WorkloadKey(info.ID, "uid-"+pod)] = clusterset.TaggedWorkload{Tag: &clusterset.Tag{Cluster: info.ID, Network: info.Network}, Workload: clusterset.NewWorkload(info.ID, &federationpb.Workload{
					Uid: "uid-" + pod, Namespace: "demo", Name: pod, Ips: []string{ip}, ServiceAccount: name, Node: fmt.Sprintf("node-%d", n%50),
					Locality: &federationpb.Locality{Region: "r1", Zone: fmt.Sprintf("z%d", n%3)}, Ready: true, Ambient: true,
					CanonicalName: name, CanonicalRevision: "v1",
				})}
				eps = append(eps, &federationpb.Endpoint{
					Namespace: "demo", Service: name, Address: ip, Ready: true,
					Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 9090}},
					Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: pod},
				})
			}
			part.Endpoints = clusterset.TagEndpoints(clusterset.NewTags(info.ID, info.Network), clusterset.NewEndpoints(eps...))
			parts = append(parts, part)
		}
		f.services["demo/"+name] = clusterset.MergeService(parts)
	}
	return f
}

// notReady returns a copy of v in which cluster c's endpoint at address is
// not ready, as the registry publishes it after that endpoint changed.
func notReady(v *clusterset.ServiceView, c federation.ClusterID, address string) *clusterset.ServiceView {
	out := *v
	out.Clusters = slices.Clone(v.Clusters)
	for i, part := range out.Clusters {
		if part.Cluster != c {
			continue
		}
		part.Endpoints = slices.Clone(part.Endpoints)
		for j, e := range part.Endpoints {
			if e.GetAddress() == address {
				pb := e.Proto()
				pb.Ready = false
				part.Endpoints[j] = clusterset.TagEndpoint(clusterset.NewTags(c, e.Network), clusterset.NewEndpoint(pb))
			}
		}
		out.Clusters[i] = part
	}
	return &out
}

// BenchmarkWorkloadAddresses builds the workload API for 100,000 pods
// (10 clusters × 1,000 services × 10 pods, on 2 networks): the full build
// a restarted hub or a network change makes, filtered to what one
// network's ztunnels see, and the incremental push after one pod turns
// ready or not ready. Encoding the resources is not included.
func BenchmarkWorkloadAddresses(b *testing.B) {
	s := benchFleet(1000, 10)

	b.Run("full", func(b *testing.B) {
		visible := 0
		b.ReportAllocs()
		for b.Loop() {
			visible = 0
			for _, it := range NewBuilder("cluster.local").Push(s, nil, nil, true) {
				if it.Visible("net-0") {
					visible++
				}
			}
		}
		// Half the pods, every service, both networks' gateways and the
		// split-horizon workloads of net-1.
		if want := 50_000 + 2*1000 + 10 + 2*1000; visible != want {
			b.Fatalf("net-0 sees %d addresses, want %d", visible, want)
		}
		b.ReportMetric(float64(visible), "addresses/op")
		b.ReportMetric(float64(visible)*float64(b.N)/b.Elapsed().Seconds(), "addresses/s")
	})

	// One pod of c5 (net-1, behind a gateway: its readiness is the
	// capacity of its service's split-horizon workload net-0 sees).
	const svcKey, wk = "demo/svc-0", "c5/uid-svc-0-0"
	w := s.workloads[wk]
	pb := w.Proto()
	pb.Ready = false
	notReadyW := clusterset.TaggedWorkload{Tag: w.Tag, Workload: clusterset.NewWorkload(w.Cluster, pb)}
	pods := [2]clusterset.TaggedWorkload{notReadyW, w}
	views := [2]*clusterset.ServiceView{notReady(s.services[svcKey], "c5", w.GetIps()[0]), s.services[svcKey]}
	// Every push sends the states s does not hold.
	podFlips, viewFlips := 0, 0
	for _, bc := range []struct {
		name     string
		endpoint bool // the pod's endpoint changes too, as when its readiness does
	}{
		{"one-pod/workload", false},
		{"one-pod/workload+endpoint", true},
	} {
		var builder *Builder
		b.Run(bc.name, func(b *testing.B) {
			if builder == nil {
				builder = NewBuilder("cluster.local")
				builder.Push(s, nil, nil, true)
			}
			var services []string
			if bc.endpoint {
				services = []string{svcKey}
			}
			items := 0
			b.ReportAllocs()
			for b.Loop() {
				s.workloads[wk] = pods[podFlips%2]
				podFlips++
				if bc.endpoint {
					s.services[svcKey] = views[viewFlips%2]
					viewFlips++
				}
				items = len(builder.Push(s, services, []string{wk}, false))
			}
			if items == 0 {
				b.Fatal("a pod change pushed nothing")
			}
			b.ReportMetric(float64(items), "items/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "changes/s")
		})
	}
}
