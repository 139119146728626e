package mcp

import (
	"encoding/hex"
	"hash/fnv"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcpv1alpha1 "istio.io/api/mcp/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/imports"
)

// Labels of the endpoints istiod reads (Istio's).
const (
	labelTLSMode           = "security.istio.io/tlsMode"
	labelApp               = "app"
	labelVersion           = "version"
	labelCanonicalName     = "service.istio.io/canonical-name"
	labelCanonicalRevision = "service.istio.io/canonical-revision"
	labelCluster           = "topology.istio.io/cluster"
	// labelManagedBy marks the entries as meshfed's, for people reading
	// istiod's config dump.
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "meshfed"
)

// Entries are the ServiceEntries for one cluster, built from a set of
// imports.
type Entries struct {
	// Cluster is the receiving cluster, whose own endpoints istiod has.
	Cluster string
	// Domain is the receiving cluster's DNS domain (cluster.local).
	Domain string

	network string // the cluster's, from the set being built
}

// resource is one MCP resource, encoded, with its name and version.
type resource struct {
	name, version string
	any           *anypb.Any
}

// build returns the ServiceEntries of a set, sorted by name.
func (e Entries) build(set *imports.Set) []resource {
	if set == nil {
		return nil
	}
	e.network = set.Network
	keys := make([]string, 0, len(set.Imports))
	for k := range set.Imports {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []resource
	for _, k := range keys {
		im := set.Imports[k]
		if se := e.local(im); se != nil {
			out = append(out, encode(im.GetNamespace(), "meshfed-"+im.GetName(), se))
		}
		if se := e.clusterset(im); se != nil {
			out = append(out, encode(im.GetNamespace(), "meshfed-"+im.GetName()+"-clusterset", se))
		}
	}
	return out
}

// local is the entry of an import's cluster-local hostname: the other
// clusters' endpoints, which istiod merges with the cluster's own Service
// of that name; nil when only this cluster has endpoints.
func (e Entries) local(im *federationpb.Import) *networkingv1alpha3.ServiceEntry {
	se := e.entry(im, im.GetName()+"."+im.GetNamespace()+".svc."+e.Domain, false)
	if len(se.GetEndpoints()) == 0 {
		return nil
	}
	return se
}

// clusterset is the entry of an MCS import's clusterset hostname and
// ClusterSetIPs: every cluster's endpoints, this one's included.
func (e Entries) clusterset(im *federationpb.Import) *networkingv1alpha3.ServiceEntry {
	if !im.GetMcs() {
		return nil
	}
	se := e.entry(im, im.GetName()+"."+im.GetNamespace()+".svc."+federation.ClustersetDomain, true)
	se.Addresses = im.GetIps()
	return se
}

func (e Entries) entry(im *federationpb.Import, host string, withOwn bool) *networkingv1alpha3.ServiceEntry {
	se := &networkingv1alpha3.ServiceEntry{
		Hosts:      []string{host},
		Location:   networkingv1alpha3.ServiceEntry_MESH_INTERNAL,
		Resolution: networkingv1alpha3.ServiceEntry_STATIC,
	}
	for _, p := range im.GetPorts() {
		if p.GetProtocol() != federationpb.Protocol_PROTOCOL_TCP && p.GetProtocol() != federationpb.Protocol_PROTOCOL_UNSPECIFIED {
			continue // Istio's sidecars carry TCP
		}
		se.Ports = append(se.Ports, &networkingv1alpha3.ServicePort{Number: p.GetPort(), Name: p.GetName(), Protocol: istioProtocol(p)})
	}
	for _, src := range im.GetSources() {
		if src.GetCluster() == e.Cluster && !withOwn {
			continue
		}
		workloads := map[string]*federationpb.Workload{}
		for _, w := range src.GetWorkloads() {
			workloads[w.GetUid()] = w
		}
		for _, ep := range src.GetEndpoints() {
			if !ep.GetReady() {
				continue
			}
			se.Endpoints = append(se.Endpoints, workloadEntry(src, ep, workloads[ep.GetWorkload().GetUid()], federation.ViaGateway(ep, e.network)))
		}
	}
	return se
}

// workloadEntry is one endpoint as istiod reads it. A gateway standing
// for another network's endpoints is reached with Istio mutual TLS, by
// its SNI; so are pods that take it (injected sidecars, ambient).
func workloadEntry(src *federationpb.ImportSource, ep *federationpb.Endpoint, w *federationpb.Workload, gateway bool) *networkingv1alpha3.WorkloadEntry {
	we := &networkingv1alpha3.WorkloadEntry{
		Address: ep.GetAddress(),
		Ports:   map[string]uint32{},
		Labels:  map[string]string{labelCluster: src.GetCluster()},
		Network: cmpOr(ep.GetNetwork(), src.GetNetwork()),
		Weight:  1,
	}
	if l := ep.GetLocality(); l.GetRegion() != "" {
		we.Locality = strings.TrimRight(l.GetRegion()+"/"+l.GetZone()+"/"+l.GetSubzone(), "/")
	}
	for _, p := range ep.GetPorts() {
		if p.GetName() != "" {
			we.Ports[p.GetName()] = p.GetPort()
		}
	}
	if gateway {
		we.Labels[labelTLSMode] = "istio"
		return we
	}
	if w != nil {
		we.ServiceAccount = w.GetServiceAccount()
		for k, v := range map[string]string{
			labelApp: w.GetApp(), labelVersion: w.GetVersion(),
			labelCanonicalName: w.GetCanonicalName(), labelCanonicalRevision: w.GetCanonicalRevision(),
		} {
			if v != "" {
				we.Labels[k] = v
			}
		}
		if w.GetMeshTls() || w.GetAmbient() {
			we.Labels[labelTLSMode] = "istio"
		}
	}
	return we
}

// istioProtocol is the Istio protocol of a port: from its app protocol,
// else from its name's prefix (Istio's own convention), else TCP.
func istioProtocol(p *federationpb.ServicePort) string {
	for _, s := range []string{p.GetAppProtocol(), p.GetName()} {
		s = strings.ToLower(s)
		switch {
		case s == "grpc" || strings.HasPrefix(s, "grpc-"):
			return "GRPC"
		case s == "http2" || s == "h2c" || strings.HasPrefix(s, "http2-"):
			return "HTTP2"
		case s == "http" || strings.HasPrefix(s, "http-"):
			return "HTTP"
		case s == "https" || strings.HasPrefix(s, "https-"):
			return "HTTPS"
		}
	}
	return "TCP"
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// encode wraps a ServiceEntry as istiod reads an MCP resource: an Any of
// istio.mcp.v1alpha1.Resource (not of the subscription's type URL),
// named namespace/name, versioned by a hash of its body.
func encode(namespace, name string, se *networkingv1alpha3.ServiceEntry) resource {
	body, err := anypb.New(se)
	if err != nil {
		panic(err) // a ServiceEntry always marshals
	}
	body.Value, _ = proto.MarshalOptions{Deterministic: true}.Marshal(se)
	h := fnv.New64a()
	_, _ = h.Write(body.GetValue())
	version := hex.EncodeToString(h.Sum(nil))
	full := namespace + "/" + name
	r := &mcpv1alpha1.Resource{
		Metadata: &mcpv1alpha1.Metadata{Name: full, Version: version, Labels: map[string]string{labelManagedBy: managedBy}},
		Body:     body,
	}
	a, err := anypb.New(r)
	if err != nil {
		panic(err)
	}
	a.Value, _ = proto.MarshalOptions{Deterministic: true}.Marshal(r)
	return resource{name: full, version: version, any: a}
}
