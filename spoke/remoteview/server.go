package remoteview

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/imports"
	"github.com/meshfed/meshfed/spoke/kubeview"
)

// PathPrefix is where a member's view is served: /clusters/<id>/api/v1/...
// (a kubeconfig's server URL may have a path).
const PathPrefix = "/clusters/"

// Config configures a Server.
type Config struct {
	// Addr is where the views are served.
	Addr string
	// Cluster is the receiving cluster: it has no view of itself.
	Cluster federation.ClusterID
	// Token is the bearer token a client must present ("" accepts any
	// client: for tests and loopback only).
	Token string
	// TLS, when set, serves HTTPS.
	TLS *tls.Config
	// Metrics, when set, registers the views' metrics.
	Metrics prometheus.Registerer
}

// Server serves each other member's view, built from the imports the hub
// replicas send, once the first set has come; until then it answers 503,
// as an API server that is starting does.
type Server struct {
	cfg     Config
	store   *imports.Store
	log     *slog.Logger
	lis     net.Listener
	metrics *viewMetrics

	mu sync.Mutex
	// views are every member's that was ever listed (nil before the
	// first set); members are those listed now, sorted.
	views   map[federation.ClusterID]*kubeview.View
	members []federation.ClusterID
	// last is the set the views were last built from (Run's alone).
	last *imports.Set
	// changed is closed, and replaced, when the members change.
	changed chan struct{}
}

// NewServer listens on cfg.Addr; Run serves.
func NewServer(cfg Config, store *imports.Store, log *slog.Logger) (*Server, error) {
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("remote views: %w", err)
	}
	return &Server{cfg: cfg, store: store, log: log, lis: lis, changed: make(chan struct{}), metrics: newViewMetrics(cfg.Metrics)}, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Members returns the members the server has a view of now (nil before
// the first set), and a channel closed when they next change.
func (s *Server) Members() ([]federation.ClusterID, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members, s.changed
}

// Run serves until ctx ends, following the store's sets.
func (s *Server) Run(ctx context.Context) error {
	handler := promhttp.InstrumentHandlerInFlight(s.metrics.inFlight, promhttp.InstrumentHandlerCounter(s.metrics.requests, s))
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() {
		if s.cfg.TLS == nil {
			served <- srv.Serve(s.lis)
			return
		}
		srv.TLSConfig = s.cfg.TLS.Clone()
		served <- srv.ServeTLS(s.lis, "", "")
	}()
	for {
		set, next := s.store.Current()
		if set != nil {
			s.update(set)
		}
		select {
		case <-next:
		case err := <-served:
			return fmt.Errorf("remote views: %w", err)
		case <-ctx.Done():
			shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
			_ = srv.Close() // watches do not end on Shutdown
			if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
	}
}

// update makes the views those of set, rebuilding those of the members
// the set touched since the last: a member's view keeps its
// resourceVersions (its watches go on), a new member gets one, and a
// member no longer listed keeps an empty one: istiod's informers then see
// its objects deleted, where a view that vanished would leave them in
// their caches until the remote secret goes.
func (s *Server) update(set *imports.Set) {
	if len(set.Clusters) == 0 {
		s.log.Warn("the hub sent no members' clusters: it predates remote views, which stay empty", "hub", set.Hub)
	}
	built := Build(set, s.cfg.Cluster, Touched(s.last, set))
	s.last = set
	members := Members(set, s.cfg.Cluster)
	s.mu.Lock()
	first := s.views == nil
	if first {
		s.views = map[federation.ClusterID]*kubeview.View{}
	}
	for _, id := range members {
		if s.views[id] == nil {
			s.views[id] = kubeview.New()
		}
	}
	for _, id := range s.members {
		if !slices.Contains(members, id) {
			built[id] = &View{Cluster: &federationpb.Cluster{Id: string(id)}} // gone: empty
		}
	}
	if first || !slices.Equal(members, s.members) {
		s.log.Info("remote views", "members", members, "hub", set.Hub)
		s.members = members
		s.metrics.members.Set(float64(len(members)))
		close(s.changed)
		s.changed = make(chan struct{})
	}
	views := maps.Clone(s.views)
	s.mu.Unlock()
	for id, b := range built {
		s.log.Debug("remote view updated", "member", id, "services", len(b.Services), "pods", len(b.Pods), "gateways", len(b.Gateways))
		if err := b.Apply(views[id]); err != nil {
			// A view's objects come from the hub, validated on the way
			// in: this is a bug. The view keeps what it had.
			s.log.Error("remote view not updated", "member", id, "err", err)
		}
	}
}

// ServeHTTP answers /clusters/<id>/... from that member's view.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
			writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
			return
		}
	}
	rest, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	id, path, _ := strings.Cut(rest, "/")
	if !ok || id == "" {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no cluster in "+r.URL.Path+": the views are at "+PathPrefix+"<cluster>/")
		return
	}
	s.mu.Lock()
	views := s.views
	v := views[federation.ClusterID(id)]
	s.mu.Unlock()
	switch {
	case views == nil:
		w.Header().Set("Retry-After", "1")
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the spoke has not heard from the hub yet")
		return
	case v == nil:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("cluster %q is not a member of the clusterset", id))
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + path
	r2.URL.RawPath = ""
	v.ServeHTTP(w, r2)
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`+"\n", message, reason, code)
}
