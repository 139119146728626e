package adspb

import "google.golang.org/grpc"

// ServiceName is Envoy's aggregated discovery service, as proxies call it.
const ServiceName = "envoy.service.discovery.v3.AggregatedDiscoveryService"

// StreamServer is a state-of-the-world ADS stream.
type StreamServer = grpc.BidiStreamingServer[DiscoveryRequest, DiscoveryResponse]

// DeltaStreamServer is a delta ADS stream.
type DeltaStreamServer = grpc.BidiStreamingServer[DeltaDiscoveryRequest, DeltaDiscoveryResponse]

// ADSServer serves both kinds of ADS stream.
type ADSServer interface {
	StreamAggregatedResources(StreamServer) error
	DeltaAggregatedResources(DeltaStreamServer) error
}

// RegisterADSServer registers srv as the aggregated discovery service of
// s: the service description protoc would generate from Envoy's ads.proto,
// written out because this package declares the messages alone.
func RegisterADSServer(s grpc.ServiceRegistrar, srv ADSServer) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: ServiceName,
		HandlerType: (*ADSServer)(nil),
		Streams: []grpc.StreamDesc{
			{
				StreamName: "StreamAggregatedResources",
				Handler: func(srv any, stream grpc.ServerStream) error {
					return srv.(ADSServer).StreamAggregatedResources(&grpc.GenericServerStream[DiscoveryRequest, DiscoveryResponse]{ServerStream: stream})
				},
				ServerStreams: true,
				ClientStreams: true,
			},
			{
				StreamName: "DeltaAggregatedResources",
				Handler: func(srv any, stream grpc.ServerStream) error {
					return srv.(ADSServer).DeltaAggregatedResources(&grpc.GenericServerStream[DeltaDiscoveryRequest, DeltaDiscoveryResponse]{ServerStream: stream})
				},
				ServerStreams: true,
				ClientStreams: true,
			},
		},
		Metadata: "envoy/service/discovery/v3/ads.proto",
	}, srv)
}
