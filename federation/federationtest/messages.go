// Package federationtest holds valid shard messages for the tests of the
// packages that read them: each call returns a new message to edit.
package federationtest

import "github.com/meshfed/meshfed/federation/federationpb"

// Service is demo/echo, a ClusterIP service with one gRPC port, exported
// with a ServiceExport.
func Service() *federationpb.Service {
	return &federationpb.Service{
		Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local",
		Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Ports:  []*federationpb.ServicePort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080, TargetPortName: "grpc"}},
		Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT},
	}
}

// Endpoint is a ready endpoint of demo/echo at 10.0.0.1, in zone
// us-east1-a.
func Endpoint() *federationpb.Endpoint {
	return &federationpb.Endpoint{
		Namespace: "demo", Service: "echo", Address: "10.0.0.1",
		Ports:    []*federationpb.EndpointPort{{Name: "grpc", Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: 8080}},
		Ready:    true,
		Locality: &federationpb.Locality{Region: "us-east1", Zone: "us-east1-a"},
	}
}

// Workload is pod demo/echo-a at 10.0.0.1.
func Workload() *federationpb.Workload {
	return &federationpb.Workload{Uid: "6c1d2b9e-0f6a-4a57-9a4e-1f0e2d3c4b5a", Namespace: "demo", Name: "echo-a", Ips: []string{"10.0.0.1"}}
}
