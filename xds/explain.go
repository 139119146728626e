package xds

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/translate"
)

// Explanation answers "why can (or can't) this proxy see that service's
// endpoints": the real path from the clusters to the proxy, step by step,
// each with its verdict. /debug/explain serves it; `meshfed explain`
// renders it.
type Explanation struct {
	Proxy    string `json:"proxy"`
	Service  string `json:"service"`
	Endpoint string `json:"endpoint,omitempty"`
	// Sees is the answer: the proxy holds (has ACKed) an assignment that
	// reaches the endpoint (or, without one, some endpoint of the
	// service).
	Sees  bool   `json:"sees"`
	Steps []Step `json:"steps"`
}

// Step is one stage of the path.
type Step struct {
	Step string `json:"step"`
	// Verdict is ok, no (the path ends here), or info.
	Verdict string `json:"verdict"`
	Detail  string `json:"detail"`
}

// Step verdicts.
const (
	VerdictOK   = "ok"
	VerdictNo   = "no"
	VerdictInfo = "info"
)

// ClusterNotes gives, for a cluster, what the hub's cluster policy last
// refused of it ("" when nothing): an endpoint the policy refused never
// reaches the clusterset, so explain can only point at the refusal.
type ClusterNotes func(federation.ClusterID) string

// explainSnap is the snapshot the server last pushed, for explain.
type explainSnap struct{ clusterset.Snapshot }

// lastPushed is the server's last pushed snapshot.
type lastPushed = atomic.Pointer[explainSnap]

// Explain walks the path from the clusters to one proxy for a service
// (host, or host:port, by its cluster-local or clusterset hostname or a
// ClusterSetIP) and, optionally, one endpoint address.
func (s *Server) Explain(proxyID, service, endpoint string) Explanation {
	ex := Explanation{Proxy: proxyID, Service: service, Endpoint: endpoint}
	add := func(step, verdict, format string, args ...any) {
		ex.Steps = append(ex.Steps, Step{Step: step, Verdict: verdict, Detail: fmt.Sprintf(format, args...)})
	}
	held := s.pushed.Load()
	if held == nil {
		add("hub", VerdictNo, "the hub serves no proxy yet: it is warming up")
		return ex
	}
	snap := held.Snapshot

	// The proxy.
	var proxy *ProxyStatus
	for _, p := range s.Proxies() {
		if p.ID == proxyID {
			proxy = &p
			break
		}
	}
	if proxy == nil {
		add("proxy", VerdictNo, "no proxy %q is connected to this hub replica (proxies of other replicas are theirs to explain)", proxyID)
		return ex
	}
	view := resources.View{Network: federation.NetworkID(proxy.Network), Locality: localityOfString(proxy.Locality)}
	add("proxy", VerdictOK, "%s proxy in cluster %q, network %q, locality %q, over %s", proxy.Kind, proxy.Cluster, proxy.Network, proxy.Locality, streamKind(proxy.Delta))

	// The service and port.
	host, port := splitHostPort(service)
	v, hostname := findService(snap, host)
	if v == nil {
		add("service", VerdictNo, "no clusterset service is named %q: it is not exported by any cluster (a ServiceExport, the meshfed.io/export label, or the spoke's --export=all)", host)
		return ex
	}
	var exporters []string
	for _, c := range v.Clusters {
		exporters = append(exporters, string(c.Cluster))
	}
	add("service", VerdictOK, "%s is %s, exported by %s", host, v.Key, strings.Join(exporters, ", "))
	for _, c := range v.Conflicts {
		add("conflicts", VerdictInfo, "%s: %s", c.Reason, c.Message)
	}
	sp := pickPort(v, port)
	if sp == nil {
		add("port", VerdictNo, "%s has no TCP port %d (it has %s)", v.Key, port, portList(v))
		return ex
	}
	clusterName := resources.ClusterName(sp.GetPort(), hostname)
	add("port", VerdictOK, "port %d (%s): xDS cluster %s", sp.GetPort(), cmp.Or(sp.GetName(), "unnamed"), clusterName)

	// The clusters, and the endpoint.
	var target *clusterset.TaggedEndpoint
	for _, c := range v.Clusters {
		state := "live"
		if c.Stale {
			state = "stale (its spoke is gone; its endpoints are served after every live cluster's)"
		}
		ready := 0
		for i, e := range c.Endpoints {
			if e.GetReady() {
				ready++
			}
			if e.GetAddress() == endpoint {
				target = &c.Endpoints[i]
			}
		}
		add("cluster "+string(c.Cluster), VerdictInfo, "%s on network %q: %d endpoints, %d ready", state, c.Network, len(c.Endpoints), ready)
		if s.cfg.ClusterNotes != nil {
			if note := s.cfg.ClusterNotes(c.Cluster); note != "" {
				add("policy "+string(c.Cluster), VerdictInfo, "the cluster policy last refused of this cluster: %s", note)
			}
		}
	}
	if endpoint != "" {
		if target == nil {
			add("endpoint", VerdictNo, "no exporting cluster publishes %s for %s: not in any EndpointSlice of the service, refused by the cluster policy (see above), or its cluster withdrawn", endpoint, v.Key)
			return ex
		}
		add("endpoint", boolVerdict(target.GetReady() || target.GetServing()), "%s in cluster %q, network %q: ready %v, serving %v, terminating %v",
			endpoint, target.Cluster, target.Network, target.GetReady(), target.GetServing(), target.GetTerminating())
	}

	// Network and assignment.
	gateways := snap.Gateways()
	cla := resources.Assignment(v, hostname, sp, view, gateways)
	if target != nil {
		if target.Network == view.Network {
			add("network", VerdictOK, "on the proxy's network %q: sent as it is", view.Network)
			ex.Sees = explainEntry(cla, target.GetAddress(), add)
		} else {
			gws := gateways.MTLS(target.Network)
			if len(gws) == 0 {
				add("network", VerdictNo, "on network %q, the proxy on %q, and no cluster reports an east-west gateway (TLS, 15443) of %q: unreachable from this proxy", target.Network, view.Network, target.Network)
				return ex
			}
			var addrs []string
			for _, g := range gws {
				addrs = append(addrs, net.JoinHostPort(g.GetAddress(), strconv.Itoa(int(g.GetPort()))))
			}
			add("network", VerdictOK, "on network %q, the proxy on %q: reached through the gateways %s", target.Network, view.Network, strings.Join(addrs, ", "))
			for _, g := range gws {
				if explainEntry(cla, g.GetAddress(), add) {
					ex.Sees = true
				}
			}
		}
	} else {
		n := 0
		for _, l := range cla.Localities {
			n += len(l.Endpoints)
		}
		add("assignment", boolVerdict(n > 0), "the proxy's view (network %q, locality %q) of %s has %d entries in %d localities", view.Network, proxy.Locality, clusterName, n, len(cla.Localities))
		ex.Sees = n > 0
	}

	// What the proxy asked for and holds.
	typ, ok := proxy.Types[resources.EndpointType]
	switch {
	case proxy.Kind == kindZtunnel:
		add("subscription", VerdictInfo, "a ztunnel is sent workload addresses, not EDS: it sees every workload of its network and, for other networks, their gateways")
		return ex
	case !ok:
		add("subscription", VerdictNo, "the proxy has not asked for any endpoints (EDS) yet")
		ex.Sees = false
		return ex
	}
	names := s.proxies.subscribed(proxyID, resources.EndpointType)
	if names != nil && !slices.Contains(names, clusterName) {
		add("subscription", VerdictNo, "the proxy watches %d EDS resources, not %s (a gRPC client asks for it once it dials %s:%d)", len(names), clusterName, hostname, sp.GetPort())
		ex.Sees = false
		return ex
	}
	add("subscription", VerdictOK, "the proxy watches %s", clusterName)
	version := s.cache.Resources(resources.EndpointType, translate.ViewFor(resources.EndpointType, view).Key)[clusterName]
	detail := fmt.Sprintf("its endpoints (EDS) are %s: it ACKed the set of version %q", typ.State, typ.AckedVersion)
	if !typ.LastAck.IsZero() {
		detail += fmt.Sprintf(" %s ago", time.Since(typ.LastAck).Round(time.Millisecond))
	}
	if typ.SentVersion != typ.AckedVersion {
		detail += fmt.Sprintf(", and was sent %q since", typ.SentVersion)
	}
	if typ.State == StateNacked {
		detail += "; it rejected the last response: " + typ.NackReason
	}
	if typ.BehindSeconds > 0 {
		detail += fmt.Sprintf("; it lacks a change observed %.3fs ago", typ.BehindSeconds)
	}
	detail += fmt.Sprintf("; %s is at version %q in the set of its view", clusterName, version)
	add("acknowledged", boolVerdict(typ.State == StateSynced), "%s", detail)
	ex.Sees = ex.Sees && typ.State == StateSynced
	return ex
}

// explainEntry finds addr in an assignment and reports its priority,
// locality and weight.
func explainEntry(cla resources.LoadAssignment, addr string, add func(step, verdict, format string, args ...any)) bool {
	for _, l := range cla.Localities {
		for _, e := range l.Endpoints {
			if e.Address != addr {
				continue
			}
			loc := l.Locality
			add("assignment", VerdictOK, "%s at priority %d, locality %s/%s/%s, weight %d of the locality's %d, %s",
				addr, l.Priority, loc.Region, loc.Zone, loc.Subzone, e.Weight, l.Weight, e.Health)
			return true
		}
	}
	add("assignment", VerdictNo, "%s is not in the proxy's assignment: neither ready nor serving, or without the port", addr)
	return false
}

func boolVerdict(ok bool) string {
	if ok {
		return VerdictOK
	}
	return VerdictNo
}

func streamKind(delta bool) string {
	if delta {
		return "delta xDS"
	}
	return "state-of-the-world xDS"
}

// splitHostPort splits "host:port" (port 0 when absent).
func splitHostPort(s string) (string, uint32) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().String(), uint32(ap.Port())
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err == nil {
			return h, uint32(n)
		}
	}
	return s, 0
}

// findService finds a service by its cluster-local or clusterset
// hostname, or a ClusterSetIP, and returns the hostname its xDS
// resources carry.
func findService(snap clusterset.Snapshot, host string) (*clusterset.ServiceView, string) {
	ip, isIP := netip.ParseAddr(host)
	for _, v := range snap.Services() {
		switch {
		case isIP == nil && slices.Contains(snap.Import(v.Key).ClustersetIPs, ip):
			return v, v.ClustersetHostname
		case host == v.Hostname, host == v.ClustersetHostname && host != "":
			return v, host
		}
	}
	return nil, ""
}

// pickPort returns the service's TCP port number port, or its only one
// when port is 0.
func pickPort(v *clusterset.ServiceView, port uint32) *federationpb.ServicePort {
	ports := resources.Ports(v)
	if port == 0 && len(ports) == 1 {
		return ports[0]
	}
	for _, p := range ports {
		if p.GetPort() == port {
			return p
		}
	}
	return nil
}

func portList(v *clusterset.ServiceView) string {
	var out []string
	for _, p := range resources.Ports(v) {
		out = append(out, strconv.Itoa(int(p.GetPort())))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func localityOfString(s string) resources.Locality {
	parts := strings.SplitN(s, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return resources.Locality{Region: parts[0], Zone: parts[1], Subzone: parts[2]}
}

// ExplainHandler serves /debug/explain?proxy=ID&service=HOST[:PORT][&endpoint=IP].
func (s *Server) ExplainHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("proxy") == "" || q.Get("service") == "" {
			http.Error(w, "want ?proxy=ID&service=HOST[:PORT][&endpoint=IP]", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Explain(q.Get("proxy"), q.Get("service"), q.Get("endpoint")))
	})
}
