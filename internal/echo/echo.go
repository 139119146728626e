package echo

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// HeaderKey is the response header naming the cluster that answered.
const HeaderKey = "x-meshfed-cluster"

// Serve serves gRPC on lis until ctx ends: the standard health service,
// reporting SERVING, with every reply (unary and streaming) carrying the
// response header HeaderKey: cluster.
//
// When ctx ends, Serve marks itself NOT_SERVING, ends open streams (such as
// health watches, which would otherwise never finish), lets unary calls in
// flight complete, and returns nil. It closes lis.
func Serve(ctx context.Context, lis net.Listener, cluster string) error {
	header := metadata.Pairs(HeaderKey, cluster)
	healthSrv := health.NewServer()
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := grpc.SetHeader(ctx, header); err != nil {
				return nil, fmt.Errorf("echo %s: set header: %w", cluster, err)
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := ss.SetHeader(header); err != nil {
				return fmt.Errorf("echo %s: set header: %w", cluster, err)
			}
			streamCtx, cancel := context.WithCancel(ss.Context())
			defer cancel()
			defer context.AfterFunc(ctx, cancel)()
			return handler(srv, endingStream{ServerStream: ss, ctx: streamCtx})
		}),
	)
	healthpb.RegisterHealthServer(srv, healthSrv)
	healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served: // only stopping the server makes Serve return nil
		srv.Stop()
		return fmt.Errorf("echo %s: serve %s: %w", cluster, lis.Addr(), err)
	case <-ctx.Done():
	}
	healthSrv.Shutdown()
	srv.GracefulStop()
	// nil once stopped; ErrServerStopped when stopped before it served.
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// endingStream is a server stream whose context also ends when the server
// shuts down, so long-lived streams let GracefulStop finish.
type endingStream struct {
	grpc.ServerStream
	ctx context.Context //nolint:containedctx // grpc's way to replace a stream's context
}

func (s endingStream) Context() context.Context { return s.ctx }
