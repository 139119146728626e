package bench

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/xds/resources"
)

// The clusterset the harness simulates: C clusters on one network; every
// cluster exports S services of E/S endpoints each; each service is
// exported by K clusters (so the clusterset has C·S/K distinct services of
// K·E/S endpoints); one ready pod (workload) behind each endpoint.
const (
	namespace   = "bench"
	servicePort = 8080
	network     = "net-0"
	trustDomain = "cluster.local"
)

// Mix is how many clients of each kind connect.
type Mix struct {
	// GRPC clients behave like proxyless gRPC: SotW ADS, subscribing by
	// name to the listener, route, cluster and endpoints of each service.
	GRPC int
	// Envoy clients behave like an Envoy sidecar scoped to its services:
	// delta ADS, by name.
	Envoy int
	// Ztunnel clients behave like ztunnel: delta ADS, wildcard Address and
	// Authorization.
	Ztunnel int
}

// Total is the number of clients.
func (m Mix) Total() int { return m.GRPC + m.Envoy + m.Ztunnel }

// world is the clusterset's fixed shape and names.
type world struct {
	clusters, perCluster, endpoints, replicas int // C, S, E, K
	services                                  int // C·S/K
	perService                                int // endpoints per service in one cluster: E/S
	subscriptions                             int // services each gRPC or Envoy client calls
}

func newWorld(cfg Config) (world, error) {
	w := world{
		clusters: cfg.Clusters, perCluster: cfg.Services, endpoints: cfg.Endpoints, replicas: cfg.Replicas,
		subscriptions: cfg.Subscriptions,
	}
	switch {
	case w.clusters < 1 || w.clusters > 5000:
		return w, fmt.Errorf("clusters: %d, want 1 to 5,000", w.clusters)
	case w.perCluster < 1:
		return w, fmt.Errorf("services: %d, want at least 1", w.perCluster)
	case w.endpoints < w.perCluster || w.endpoints%w.perCluster != 0 || w.endpoints > 60_000:
		return w, fmt.Errorf("endpoints: %d per cluster, want a multiple of services (%d), at most 60,000", w.endpoints, w.perCluster)
	case w.replicas < 1 || w.replicas > w.clusters || (w.clusters*w.perCluster)%w.replicas != 0:
		return w, fmt.Errorf("replicas: %d, want 1 to clusters (%d), dividing clusters × services (%d)",
			w.replicas, w.clusters, w.clusters*w.perCluster)
	case w.subscriptions < 1:
		return w, errors.New("subscriptions: want at least 1")
	case w.clusters*w.endpoints > maxEndpoints:
		return w, fmt.Errorf("clusters × endpoints: %d, want at most %d (the addresses of 10.0.0.0/8)", w.clusters*w.endpoints, maxEndpoints)
	}
	w.services = w.clusters * w.perCluster / w.replicas
	w.perService = w.endpoints / w.perCluster
	if w.subscriptions > w.services {
		return w, fmt.Errorf("subscriptions: %d, more than the %d services", w.subscriptions, w.services)
	}
	return w, nil
}

func clusterID(c int) string { return fmt.Sprintf("c%03d", c) }

func serviceName(g int) string { return fmt.Sprintf("svc-%04d", g) }

func hostname(g int) string { return serviceName(g) + "." + namespace + ".svc.cluster.local" }

func serviceKey(g int) string { return federation.ServiceKey(namespace, serviceName(g)) }

// edsName is the cluster, route and endpoints resource name of service g.
func edsName(g int) string { return resources.ClusterName(servicePort, hostname(g)) }

func listenerName(g int) string { return resources.ListenerName(hostname(g), servicePort) }

// locality is cluster c's: ten clusters per region.
func locality(c int) *federationpb.Locality {
	return &federationpb.Locality{Region: fmt.Sprintf("r%d", c/10), Zone: fmt.Sprintf("z%d", c)}
}

// exportsOf returns the services cluster c exports: replica r of service g
// is in cluster (g·K + r) mod C, so every cluster has exactly S.
func (w world) exportsOf(c int) []int {
	var out []int
	for i := range w.services * w.replicas {
		if i%w.clusters == c {
			out = append(out, i/w.replicas)
		}
	}
	return out
}

// initialAddress is the first address of the i-th endpoint of cluster c:
// the clusters' endpoints one after another in 10.0.0.0/8.
func (w world) initialAddress(c, i int) string {
	n := c*w.endpoints + i
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}).String()
}

// maxEndpoints is how many initial addresses there are.
const maxEndpoints = 1 << 24

// churnAddress is the address of change n's new pod, in 100.64.0.0/10,
// distinct from every other address of the run: clients identify a change
// by it.
func churnAddress(n int) string {
	return netip.AddrFrom4([4]byte{100, byte(64 + n>>16), byte(n >> 8), byte(n)}).String()
}

// maxChanges is how many distinct churn addresses there are.
const maxChanges = 64 << 16

func cluster(c int) *federationpb.Cluster {
	return &federationpb.Cluster{Id: clusterID(c), Network: network, TrustDomain: trustDomain}
}

func service(g int) *federationpb.Service {
	return &federationpb.Service{
		Namespace: namespace, Name: serviceName(g), Hostname: hostname(g),
		Type:  federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Ports: []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: servicePort, TargetPort: servicePort}},
		// Exported by label: one hostname per service (an MCS export adds the
		// clusterset hostname, doubling every resource).
		Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_LABEL},
	}
}

// pod is one endpoint of a cluster and the workload behind it.
type pod struct {
	service int // global service index
	address string
	uid     string
	node    string
}

func (p pod) endpoint(c int) *federationpb.Endpoint {
	return &federationpb.Endpoint{
		Namespace: namespace, Service: serviceName(p.service), Address: p.address,
		Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: servicePort}},
		Ready:    true,
		Serving:  true,
		Node:     p.node,
		Locality: locality(c),
		Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: p.uid, Uid: p.uid},
	}
}

func (p pod) workload(c int) *federationpb.Workload {
	svc := serviceName(p.service)
	return &federationpb.Workload{
		Uid: p.uid, Namespace: namespace, Name: p.uid, Ips: []string{p.address},
		ServiceAccount: svc, Node: p.node, Locality: locality(c),
		App: svc, Version: "v1", CanonicalName: svc, CanonicalRevision: "v1",
		Ready: true, Ambient: true,
	}
}

// initialPods returns cluster c's pods, endpoint i of the cluster at index i.
func (w world) initialPods(c int) []pod {
	out := make([]pod, 0, w.endpoints)
	for _, g := range w.exportsOf(c) {
		for range w.perService {
			i := len(out)
			out = append(out, pod{
				service: g, address: w.initialAddress(c, i),
				uid: fmt.Sprintf("%s-pod-%05d", clusterID(c), i), node: fmt.Sprintf("node-%02d", i%50),
			})
		}
	}
	return out
}

// wantAddresses is the number of Address resources a ztunnel of the
// network receives: every workload and every service.
func (w world) wantAddresses() int { return w.clusters*w.endpoints + w.services }
