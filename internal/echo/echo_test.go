package echo

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is an echo server on a loopback port with a client connected to it.
type server struct {
	client healthpb.HealthClient
	stop   context.CancelFunc
	done   chan struct{} // closed when Serve has returned
	err    error         // Serve's result, set before done is closed
}

func start(t *testing.T, cluster string) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	s := &server{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = Serve(ctx, lis, cluster)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		<-s.done
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		<-s.done
		if err := conn.Close(); err != nil {
			t.Error(err)
		}
	})
	s.client = healthpb.NewHealthClient(conn)
	return s
}

func TestServeHeader(t *testing.T) {
	tests := []struct {
		name string
		// call makes one RPC and returns its response header and status.
		call func(context.Context, healthpb.HealthClient) (metadata.MD, healthpb.HealthCheckResponse_ServingStatus, error)
	}{
		{
			name: "unary Check",
			call: func(ctx context.Context, c healthpb.HealthClient) (metadata.MD, healthpb.HealthCheckResponse_ServingStatus, error) {
				var md metadata.MD
				resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
				return md, resp.GetStatus(), err
			},
		},
		{
			name: "streaming Watch",
			call: func(ctx context.Context, c healthpb.HealthClient) (metadata.MD, healthpb.HealthCheckResponse_ServingStatus, error) {
				stream, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
				if err != nil {
					return nil, 0, err
				}
				resp, err := stream.Recv()
				if err != nil {
					return nil, 0, err
				}
				md, err := stream.Header()
				return md, resp.GetStatus(), err
			},
		},
	}
	for _, cluster := range []string{"east", "west"} {
		s := start(t, cluster)
		for _, tt := range tests {
			t.Run(cluster+"/"+tt.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				md, got, err := tt.call(ctx, s.client)
				if err != nil {
					t.Fatalf("call: %v", err)
				}
				if got != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("status %v, want SERVING", got)
				}
				if diff := cmp.Diff([]string{cluster}, md.Get(HeaderKey)); diff != "" {
					t.Errorf("header %s (-want +got):\n%s", HeaderKey, diff)
				}
			})
		}
	}
}

// TestServeStopsWithOpenStream checks that a health watch, which never ends
// by itself, does not keep Serve from returning when its context ends.
func TestServeStopsWithOpenStream(t *testing.T) {
	s := start(t, "east")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	watch, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil { // the server now holds the stream
		t.Fatal(err)
	}
	s.stop()

	select {
	case <-s.done:
	case <-ctx.Done():
		t.Fatal("Serve did not return after its context ended")
	}
	if s.err != nil {
		t.Errorf("Serve() = %v, want nil after its context ended", s.err)
	}
	for {
		_, err := watch.Recv()
		if err == nil {
			continue // a NOT_SERVING update may come first
		}
		if code := status.Code(err); code != codes.Canceled && code != codes.Unavailable {
			t.Errorf("watch ended with %v, want Canceled or Unavailable", err)
		}
		break
	}
}
