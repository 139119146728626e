package spoke

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshfed/meshfed/internal/debughttp"
)

// debugOptions are the debug port's switches; the zero value serves no
// command line and, over loopback, answers only requests that name
// localhost or an IP address (see [debughttp.Harden]).
type debugOptions struct {
	// cmdline serves /debug/pprof/cmdline, which shows the spoke's command
	// line and with it the paths of its key and kubeconfig.
	cmdline bool
	// hosts are further names accepted in the Host header over loopback.
	hosts []string
	// ready answers /readyz (nil: always ready).
	ready func() bool
}

// serveDebug is serveDebugWith with the default options.
func serveDebug(ctx context.Context, lis net.Listener, metrics *prometheus.Registry) error {
	return serveDebugWith(ctx, lis, metrics, debugOptions{})
}

// serveDebugWith serves /healthz, /readyz, the spoke's metrics (/metrics) and Go's
// profiles (/debug/pprof/) on lis until ctx ends. Profiles show what the
// spoke holds per object, which is what matters when it runs in every
// cluster of a fleet; keep the address local.
func serveDebugWith(ctx context.Context, lis net.Listener, metrics *prometheus.Registry, opts debugOptions) error {
	srv := &http.Server{Handler: debugHandler(lis.Addr(), metrics, opts), ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	})
	defer stop()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("debug server: %w", err)
	}
	return nil
}

// debugHandler is the debug port of a spoke listening on addr: read-only,
// and refusing foreign names over loopback.
func debugHandler(addr net.Addr, metrics *prometheus.Registry, opts debugOptions) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if opts.ready != nil && !opts.ready() {
			http.Error(w, "not ready: no hub has acknowledged the cluster's full state yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	debughttp.RegisterPprof(mux, opts.cmdline)
	return debughttp.Harden(mux, debughttp.Options{Addr: addr, Hosts: opts.hosts})
}
