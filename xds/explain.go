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
	e := explainer{proxies: s.Proxies, subscribed: s.proxies.subscribed, resources: s.cache.Resources, notes: s.cfg.ClusterNotes}
	if held := s.pushed.Load(); held != nil {
		e.snap = held.Snapshot
	}
	return e.explain(proxyID, service, endpoint)
}

// explainer is /debug/explain: a view over what the server serves from,
// the snapshot it last pushed, and what it knows of the proxies: the book
// (what each asked for and ACKed) and the cache (what each set holds).
type explainer struct {
	snap       clusterset.Snapshot // nil while the hub warms up
	proxies    func() []ProxyStatus
	subscribed func(proxyID, typeURL string) (names []string, all bool)
	resources  func(typeURL, view string) map[string]string
	notes      ClusterNotes
}

// explanation is an Explanation being written.
type explanation struct{ Explanation }

func (x *explanation) add(step, verdict, format string, args ...any) {
	x.Steps = append(x.Steps, Step{Step: step, Verdict: verdict, Detail: fmt.Sprintf(format, args...)})
}

// target is what an explanation is about: a service's port, as a proxy
// names it, and the endpoint asked about (nil when none).
type target struct {
	v        *clusterset.ServiceView
	hostname string
	port     *federationpb.ServicePort
	cluster  string // the xDS cluster (and EDS resource) name
	endpoint *clusterset.TaggedEndpoint
}

func (e explainer) explain(proxyID, service, endpoint string) Explanation {
	x := &explanation{Explanation{Proxy: proxyID, Service: service, Endpoint: endpoint}}
	if e.snap == nil {
		x.add("hub", VerdictNo, "the hub serves no proxy yet: it is warming up")
		return x.Explanation
	}
	proxy, ok := e.proxy(x, proxyID)
	if !ok {
		return x.Explanation
	}
	t, ok := e.service(x, service)
	if !ok || !e.clusters(x, &t, endpoint) {
		return x.Explanation
	}
	view := resources.View{Network: federation.NetworkID(proxy.Network), Locality: localityOfString(proxy.Locality), Proxyless: proxy.Kind == kindGRPC}
	if !e.assignment(x, t, proxy, view) {
		return x.Explanation
	}
	e.held(x, t, proxy, view)
	return x.Explanation
}

// proxy finds the proxy among those connected.
func (e explainer) proxy(x *explanation, proxyID string) (*ProxyStatus, bool) {
	for _, p := range e.proxies() {
		if p.ID == proxyID {
			x.add("proxy", VerdictOK, "%s proxy in cluster %q, network %q, locality %q, over %s", p.Kind, p.Cluster, p.Network, p.Locality, streamKind(p.Delta))
			return &p, true
		}
	}
	x.add("proxy", VerdictNo, "no proxy %q is connected to this hub replica (proxies of other replicas are theirs to explain)", proxyID)
	return nil, false
}

// service finds the service and its port.
func (e explainer) service(x *explanation, service string) (target, bool) {
	host, port := splitHostPort(service)
	v, hostname := findService(e.snap, host)
	if v == nil {
		x.add("service", VerdictNo, "no clusterset service is named %q: it is not exported by any cluster (a ServiceExport, the meshfed.io/export label, or the spoke's --export=all)", host)
		return target{}, false
	}
	var exporters []string
	for _, c := range v.Clusters {
		exporters = append(exporters, string(c.Cluster))
	}
	x.add("service", VerdictOK, "%s is %s, exported by %s", host, v.Key, strings.Join(exporters, ", "))
	for _, c := range v.Conflicts {
		x.add("conflicts", VerdictInfo, "%s: %s", c.Reason, c.Message)
	}
	sp := pickPort(v, port)
	if sp == nil {
		x.add("port", VerdictNo, "%s has no TCP port %d (it has %s)", v.Key, port, portList(v))
		return target{}, false
	}
	t := target{v: v, hostname: hostname, port: sp, cluster: resources.ClusterName(sp.GetPort(), hostname)}
	x.add("port", VerdictOK, "port %d (%s): xDS cluster %s", sp.GetPort(), cmp.Or(sp.GetName(), "unnamed"), t.cluster)
	return t, true
}

// clusters describes each exporting cluster, and finds the endpoint asked
// about; it reports false when there is one and no cluster has it.
func (e explainer) clusters(x *explanation, t *target, endpoint string) bool {
	for _, c := range t.v.Clusters {
		state := "live"
		if c.Stale {
			state = "stale (its spoke is gone; its endpoints are served after every live cluster's)"
		}
		ready := 0
		for i, ep := range c.Endpoints {
			if ep.GetReady() {
				ready++
			}
			if ep.GetAddress() == endpoint {
				t.endpoint = &c.Endpoints[i]
			}
		}
		x.add("cluster "+string(c.Cluster), VerdictInfo, "%s on network %q: %d endpoints, %d ready", state, c.Network, len(c.Endpoints), ready)
		if e.notes != nil {
			if note := e.notes(c.Cluster); note != "" {
				x.add("policy "+string(c.Cluster), VerdictInfo, "the cluster policy last refused of this cluster: %s", note)
			}
		}
	}
	if endpoint == "" {
		return true
	}
	if t.endpoint == nil {
		x.add("endpoint", VerdictNo, "no exporting cluster publishes %s for %s: not in any EndpointSlice of the service, refused by the cluster policy (see above), or its cluster withdrawn", endpoint, t.v.Key)
		return false
	}
	ep := t.endpoint
	x.add("endpoint", boolVerdict(ep.GetReady() || ep.GetServing()), "%s in cluster %q, network %q: ready %v, serving %v, terminating %v",
		endpoint, ep.Cluster, ep.Network, ep.GetReady(), ep.GetServing(), ep.GetTerminating())
	return true
}

// assignment says how the proxy's view reaches the endpoint (directly or
// through its network's gateways), or how many entries the view has
// without one; it reports false when the walk ends there.
func (e explainer) assignment(x *explanation, t target, proxy *ProxyStatus, view resources.View) bool {
	gateways := e.snap.Gateways()
	cla := resources.Assignment(t.v, t.hostname, t.port, view, gateways)
	switch ep := t.endpoint; {
	case ep == nil:
		n := 0
		for _, l := range cla.Localities {
			n += len(l.Endpoints)
		}
		x.add("assignment", boolVerdict(n > 0), "the proxy's view (network %q, locality %q) of %s has %d entries in %d localities", view.Network, proxy.Locality, t.cluster, n, len(cla.Localities))
		x.Sees = n > 0
	case ep.Network == view.Network:
		x.add("network", VerdictOK, "on the proxy's network %q: sent as it is", view.Network)
		x.Sees = explainEntry(cla, ep.GetAddress(), x.add)
	default:
		gws := gateways.MTLS(ep.Network)
		if len(gws) == 0 {
			x.add("network", VerdictNo, "on network %q, the proxy on %q, and no cluster reports an east-west gateway (TLS, 15443) of %q: unreachable from this proxy", ep.Network, view.Network, ep.Network)
			return false
		}
		var addrs []string
		for _, g := range gws {
			addrs = append(addrs, net.JoinHostPort(g.GetAddress(), strconv.Itoa(int(g.GetPort()))))
		}
		x.add("network", VerdictOK, "on network %q, the proxy on %q: reached through the gateways %s", ep.Network, view.Network, strings.Join(addrs, ", "))
		for _, g := range gws {
			if explainEntry(cla, g.GetAddress(), x.add) {
				x.Sees = true
			}
		}
	}
	return true
}

// held says what the proxy asked for and holds of the service's EDS.
func (e explainer) held(x *explanation, t target, proxy *ProxyStatus, view resources.View) {
	typ, ok := proxy.Types[resources.EndpointType]
	switch {
	case proxy.Kind == kindZtunnel:
		x.add("subscription", VerdictInfo, "a ztunnel is sent workload addresses, not EDS: it sees every workload of its network and, for other networks, their gateways")
		return
	case !ok:
		x.add("subscription", VerdictNo, "the proxy has not asked for any endpoints (EDS) yet")
		x.Sees = false
		return
	}
	names, all := e.subscribed(proxy.ID, resources.EndpointType)
	if !all && !slices.Contains(names, t.cluster) {
		x.add("subscription", VerdictNo, "the proxy watches %d EDS resources, not %s (a gRPC client asks for it once it dials %s:%d)", len(names), t.cluster, t.hostname, t.port.GetPort())
		x.Sees = false
		return
	}
	x.add("subscription", VerdictOK, "the proxy watches %s", t.cluster)
	version := e.resources(resources.EndpointType, translate.ViewFor(resources.EndpointType, view).Key)[t.cluster]
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
	detail += fmt.Sprintf("; %s is at version %q in the set of its view", t.cluster, version)
	x.add("acknowledged", boolVerdict(typ.State == StateSynced), "%s", detail)
	x.Sees = x.Sees && typ.State == StateSynced
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
