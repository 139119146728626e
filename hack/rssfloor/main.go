// Command rssfloor is the least a Go gRPC server with an HTTP debug server
// holds in memory: a gRPC server, and an HTTP server with Prometheus'
// metrics and pprof, all idle. Its RSS (VmRSS and RssFile in
// /proc/PID/status) read beside an idle meshfed-hub's, both built as the
// images are, says how much of the hub is that floor. BENCHMARKS.md ("What
// the hub's RSS is made of") has the figures and the commands.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

func main() {
	grpcAddr := flag.String("grpc-addr", "127.0.0.1:0", "the gRPC server's address")
	httpAddr := flag.String("http-addr", "127.0.0.1:18099", "the HTTP server's address (/metrics, /debug/pprof/)")
	flag.Parse()

	lis, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(lis) }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = http.Serve(hl, mux) }() //nolint:gosec // idle, for a measurement

	// One message through protobuf's runtime, as any server's first.
	log.Printf("grpc on %s, http on %s (%s)", lis.Addr(), hl.Addr(), (&anypb.Any{TypeUrl: "floor"}).String())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	<-stop
	srv.Stop()
}
