package resources

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

const (
	tcp  = federationpb.Protocol_PROTOCOL_TCP
	udp  = federationpb.Protocol_PROTOCOL_UDP
	tls  = federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS
	hbon = federationpb.GatewayProtocol_GATEWAY_PROTOCOL_HBONE
)

// grpcPort is the service port most fixtures use: 8080 in front of pods
// listening on 9090.
func grpcPort() *federationpb.ServicePort {
	return &federationpb.ServicePort{Name: "grpc", Protocol: tcp, Port: 8080, TargetPort: 9090}
}

// baseService is demo/echo as one cluster exports it.
func baseService() *federationpb.Service {
	return &federationpb.Service{
		Namespace: "demo",
		Name:      "echo",
		Hostname:  "echo.demo.svc.cluster.local",
		Ports:     []*federationpb.ServicePort{grpcPort()},
		Type:      federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Export: &federationpb.Export{
			Source: federationpb.ExportSource_EXPORT_SOURCE_LABEL,
			Time:   timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		},
	}
}

// pod is a ready endpoint of demo/echo serving "grpc" on 9090.
func pod(addr, region, zone string, edits ...func(*federationpb.Endpoint)) *federationpb.Endpoint {
	e := &federationpb.Endpoint{
		Namespace: "demo",
		Service:   "echo",
		Address:   addr,
		Ports:     []*federationpb.EndpointPort{{Name: "grpc", Protocol: tcp, Port: 9090}},
		Ready:     true,
		Serving:   true,
		Locality:  &federationpb.Locality{Region: region, Zone: zone},
	}
	for _, edit := range edits {
		edit(e)
	}
	return e
}

func notReady(e *federationpb.Endpoint) { e.Ready, e.Serving = false, false }

func terminating(e *federationpb.Endpoint) { e.Ready, e.Serving, e.Terminating = false, true, true }

// plaintext: the endpoint's pod takes no Istio mTLS.
func plaintext(e *federationpb.Endpoint) { e.Plaintext = true }

func terminated(e *federationpb.Endpoint) { e.Ready, e.Serving, e.Terminating = false, false, true }

func subzone(sz string) func(*federationpb.Endpoint) {
	return func(e *federationpb.Endpoint) { e.Locality.Subzone = sz }
}

func ports(ps ...*federationpb.EndpointPort) func(*federationpb.Endpoint) {
	return func(e *federationpb.Endpoint) { e.Ports = ps }
}

// export is one cluster's export of svc with the given endpoints.
func export(cluster federation.ClusterID, network federation.NetworkID, svc *federationpb.Service, eps ...*federationpb.Endpoint) clusterset.ClusterService {
	return clusterset.ClusterService{
		Cluster:   cluster,
		Network:   network,
		Service:   svc,
		Endpoints: clusterset.TagEndpoints(clusterset.NewTags(cluster, network), clusterset.NewEndpoints(eps...)),
	}
}

// merged is the clusterset view of parts.
// stale marks an export's cluster stale.
func stale(c clusterset.ClusterService) clusterset.ClusterService {
	c.Stale = true
	return c
}

func merged(parts ...clusterset.ClusterService) *clusterset.ServiceView {
	return clusterset.MergeService(parts)
}

// withService returns baseService edited.
func withService(edit func(*federationpb.Service)) *federationpb.Service {
	s := baseService()
	edit(s)
	return s
}

func gateway(addr string, port uint32, protocol federationpb.GatewayProtocol) *federationpb.Gateway {
	return &federationpb.Gateway{Address: addr, Port: port, Protocol: protocol}
}

func onNetwork(g *federationpb.Gateway, network string) *federationpb.Gateway {
	g = proto.Clone(g).(*federationpb.Gateway)
	g.Network = network
	return g
}

func cluster(id federation.ClusterID, network federation.NetworkID, gws ...*federationpb.Gateway) *clusterset.ClusterInfo {
	return &clusterset.ClusterInfo{ID: id, Network: network, Gateways: gws}
}

func view(network federation.NetworkID, region, zone, sz string) View {
	return View{Network: network, Locality: Locality{Region: region, Zone: zone, Subzone: sz}}
}

// grpcView is a gRPC client's view.
func grpcView(network federation.NetworkID, region, zone string) View {
	v := view(network, region, zone, "")
	v.Proxyless = true
	return v
}
