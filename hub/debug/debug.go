// Package debug serves the hub's operator endpoints: JSON views of the
// clusters and the merged services under /debug/, health and readiness
// probes, Prometheus metrics and Go's profiles. The port is read-only and
// refuses names other than localhost over loopback, against DNS
// rebinding (package debughttp).
package debug

import (
	"encoding/json"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/clustersetip"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/debughttp"
)

// Source is what the debug endpoints read.
type Source interface {
	Status() []registry.ClusterStatus
	Current() clusterset.Snapshot
	ClustersetIPCollisions() []clustersetip.Collision
}

var _ Source = (*registry.Registry)(nil)

// Options are the debug port's switches. The zero value serves no
// command line and, to requests that arrive over loopback, answers only
// when they name localhost or an IP address (see [debughttp.Harden]).
type Options struct {
	// Cmdline serves /debug/pprof/cmdline, which shows the hub's command
	// line and with it the paths of its keys.
	Cmdline bool
	// Addr is the debug listener's address: on loopback, every request's
	// Host must name localhost, an IP address or one of Hosts.
	Addr net.Addr
	// Hosts are further names accepted in the Host header over loopback.
	Hosts []string
	// Healthy answers /healthz (nil: healthy while it answers): an error
	// says which loop is stuck.
	Healthy func() error
}

// Handler returns the debug mux with the default [Options]. ready reports
// readiness for /readyz; extra adds other components' pages by pattern
// (such as xDS's "GET /debug/proxies").
func Handler(src Source, gatherer prometheus.Gatherer, ready func() bool, extra map[string]http.Handler) http.Handler {
	return HandlerWithOptions(src, gatherer, ready, extra, Options{})
}

// HandlerWithOptions is [Handler] with opts. Whatever the patterns in
// extra say, only GET and HEAD requests reach them: the debug port is
// read-only.
func HandlerWithOptions(src Source, gatherer prometheus.Gatherer, ready func() bool, extra map[string]http.Handler, opts Options) http.Handler {
	mux := http.NewServeMux()
	for pattern, h := range extra {
		mux.Handle(pattern, h)
	}
	mux.HandleFunc("GET /debug/clusters", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, ClustersResponse{Clusters: src.Status()})
	})
	mux.HandleFunc("GET /debug/services", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, servicesResponse(src.Current(), src.ClustersetIPCollisions()))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if opts.Healthy != nil {
			if err := opts.Healthy(); err != nil {
				http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	// Go's profiles, as on the spoke. The load harness forces a GC through
	// heap?gc=1.
	debughttp.RegisterPprof(mux, opts.Cmdline)
	return debughttp.Harden(mux, debughttp.Options{Addr: opts.Addr, Hosts: opts.Hosts})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ClustersResponse is the body of /debug/clusters.
type ClustersResponse struct {
	Clusters []registry.ClusterStatus `json:"clusters"`
}

// ServicesResponse is the body of /debug/services.
type ServicesResponse struct {
	Revision uint64    `json:"revision"`
	Services []Service `json:"services"`
}

// Service is one merged clusterset service.
type Service struct {
	Namespace          string                `json:"namespace"`
	Name               string                `json:"name"`
	Hostname           string                `json:"hostname"`
	ClustersetHostname string                `json:"clustersetHostname,omitempty"`
	Type               string                `json:"type"`
	Ports              []Port                `json:"ports"`
	Conflicts          []clusterset.Conflict `json:"conflicts,omitempty"`
	// The MCS import's decisions: its ClusterSetIPs (or why one is
	// missing), and the exporting clusters whose export every member
	// cluster holds (their ServiceExports are Ready).
	ClustersetIPs []string               `json:"clustersetIPs,omitempty"`
	IPError       string                 `json:"ipError,omitempty"`
	Ready         []federation.ClusterID `json:"ready,omitempty"`
	// Collisions are ClusterSetIPs the import's clusters held that an
	// older import holds: the import got others.
	Collisions []string         `json:"collisions,omitempty"`
	Clusters   []ServiceCluster `json:"clusters"`
}

// Port is a service port.
type Port struct {
	Name     string `json:"name,omitempty"`
	Port     uint32 `json:"port"`
	Protocol string `json:"protocol"`
}

// ServiceCluster is one cluster's export of a service.
type ServiceCluster struct {
	Cluster    federation.ClusterID `json:"cluster"`
	Network    federation.NetworkID `json:"network"`
	ClusterIPs []string             `json:"clusterIPs,omitempty"`
	// Stale: the cluster's lease is stale, so proxies get these endpoints
	// after every live cluster's.
	Stale     bool       `json:"stale,omitempty"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is a tagged endpoint.
type Endpoint struct {
	Address     string               `json:"address"`
	Cluster     federation.ClusterID `json:"cluster"`
	Network     federation.NetworkID `json:"network"`
	Ports       []Port               `json:"ports,omitempty"`
	Ready       bool                 `json:"ready"`
	Serving     bool                 `json:"serving"`
	Terminating bool                 `json:"terminating,omitempty"`
	Node        string               `json:"node,omitempty"`
	Locality    string               `json:"locality,omitempty"`
	Workload    string               `json:"workload,omitempty"`
}

func protocolName(p federationpb.Protocol) string {
	switch p {
	case federationpb.Protocol_PROTOCOL_UDP:
		return "UDP"
	case federationpb.Protocol_PROTOCOL_SCTP:
		return "SCTP"
	default:
		return "TCP"
	}
}

func servicesResponse(s clusterset.Snapshot, collisions []clustersetip.Collision) ServicesResponse {
	out := ServicesResponse{Revision: s.Revision(), Services: []Service{}}
	for _, v := range s.Services() {
		svc := Service{
			Namespace: v.Namespace, Name: v.Name, Hostname: v.Hostname, ClustersetHostname: v.ClustersetHostname,
			Type: v.Type.String(), Conflicts: v.Conflicts, Ports: []Port{}, Clusters: []ServiceCluster{},
		}
		for _, p := range v.Ports {
			svc.Ports = append(svc.Ports, Port{Name: p.GetName(), Port: p.GetPort(), Protocol: protocolName(p.GetProtocol())})
		}
		imp := s.Import(v.Key)
		for _, ip := range imp.ClustersetIPs {
			if ip.IsValid() {
				svc.ClustersetIPs = append(svc.ClustersetIPs, ip.String())
			}
		}
		svc.IPError, svc.Ready = imp.IPError, imp.Ready
		for _, c := range collisions {
			if c.Loser == v.Key {
				svc.Collisions = append(svc.Collisions, c.String())
			}
		}
		for _, c := range v.Clusters {
			sc := ServiceCluster{Cluster: c.Cluster, Network: c.Network, ClusterIPs: c.Service.GetClusterIps(), Stale: c.Stale, Endpoints: []Endpoint{}}
			for _, e := range c.Endpoints {
				ep := Endpoint{
					Address: e.GetAddress(), Cluster: e.Cluster, Network: e.Network,
					Ready: e.GetReady(), Serving: e.GetServing(), Terminating: e.GetTerminating(), Node: e.GetNode(),
				}
				if l := e.GetLocality(); l != nil {
					ep.Locality = l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubzone()
				}
				if wr, ok := e.Workload(); ok {
					ep.Workload = wr.Kind + "/" + wr.Name
				}
				for _, p := range e.GetPorts() {
					ep.Ports = append(ep.Ports, Port{Name: p.GetName(), Port: p.GetPort(), Protocol: protocolName(p.GetProtocol())})
				}
				sc.Endpoints = append(sc.Endpoints, ep)
			}
			svc.Clusters = append(svc.Clusters, sc)
		}
		out.Services = append(out.Services, svc)
	}
	return out
}
