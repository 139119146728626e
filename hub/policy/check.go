package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Check reports the first object of an update that the cluster's rules
// do not allow: a *federation.ValidationError naming the object and
// field, wrapped with federation.ErrNotAllowed. Only what the update adds
// or replaces is checked; removals always are allowed. The update is
// expected to be valid (federation.ValidateUpdate).
func (c *Cluster) Check(u *federationpb.ShardUpdate) error {
	if cl := u.GetCluster(); cl != nil {
		if err := c.CheckCluster(cl); err != nil {
			return err
		}
		for i, g := range cl.GetGateways() {
			if err := c.CheckGateway(cl.GetId(), i, g); err != nil {
				return err
			}
		}
	}
	for _, s := range u.GetServices() {
		if err := c.CheckService(s); err != nil {
			return err
		}
	}
	for _, e := range u.GetEndpoints() {
		if err := c.CheckEndpoint(e); err != nil {
			return err
		}
	}
	for _, w := range u.GetWorkloads() {
		if err := c.CheckWorkload(w); err != nil {
			return err
		}
	}
	return nil
}

// CheckCluster checks a cluster's own facts: its network and trust
// domain (its gateways are [Cluster.CheckGateway]'s).
func (c *Cluster) CheckCluster(cl *federationpb.Cluster) error {
	id := cl.GetId()
	if !slices.Contains(c.Networks, cl.GetNetwork()) {
		return c.deny("cluster", id, "network", "network %q is not one of the cluster's (%s)", cl.GetNetwork(), list(c.Networks))
	}
	if td := cl.GetTrustDomain(); td != "" && !slices.Contains(c.TrustDomains, td) {
		return c.deny("cluster", id, "trustDomain", "trust domain %q is not one of the cluster's (%s)", td, list(c.TrustDomains))
	}
	return nil
}

// CheckGateway checks gateway i of cluster id.
func (c *Cluster) CheckGateway(id string, i int, g *federationpb.Gateway) error {
	f := fmt.Sprintf("gateways[%d]", i)
	if !slices.Contains(c.Networks, g.GetNetwork()) {
		// A gateway fronts the network it names: a cluster may front only
		// its own, or it would draw another network's traffic.
		return c.deny("cluster", id, f+".network", "network %q is not one of the cluster's (%s)", g.GetNetwork(), list(c.Networks))
	}
	ns, _, _ := strings.Cut(g.GetService(), "/")
	if !slices.Contains(c.GatewayNamespaces, ns) {
		return c.deny("cluster", id, f+".service", "gateway Service %q is not in the cluster's gateway namespaces (%s)", g.GetService(), list(c.GatewayNamespaces))
	}
	if c.GatewayCIDRs != nil {
		if _, err := netip.ParseAddr(g.GetAddress()); err != nil {
			return c.deny("cluster", id, f+".address", "%q is a host name; with gateway CIDRs the address must be an IP in them (%s)", g.GetAddress(), prefixList(c.GatewayCIDRs))
		}
		if !within(c.GatewayCIDRs, g.GetAddress()) {
			return c.deny("cluster", id, f+".address", "%s is outside the cluster's gateway CIDRs (%s)", g.GetAddress(), prefixList(c.GatewayCIDRs))
		}
	}
	return nil
}

// CheckService checks a service.
func (c *Cluster) CheckService(s *federationpb.Service) error {
	if !c.exports(s.GetNamespace()) {
		return c.deny("service", federation.KeyOfService(s), "namespace",
			"namespace %q is not one the cluster may export from (%s)", s.GetNamespace(), list(c.ExportNamespaces))
	}
	return nil
}

// CheckEndpoint checks an endpoint. It runs for every endpoint of a full
// state: the key is built only for a refusal.
func (c *Cluster) CheckEndpoint(e *federationpb.Endpoint) error {
	if !c.exports(e.GetNamespace()) {
		return c.deny("endpoint", federation.EndpointKey(e), "namespace",
			"namespace %q is not one the cluster may export from (%s)", e.GetNamespace(), list(c.ExportNamespaces))
	}
	if n := e.GetNetwork(); n != "" && !slices.Contains(c.Networks, n) {
		return c.deny("endpoint", federation.EndpointKey(e), "network", "network %q is not one of the cluster's (%s)", n, list(c.Networks))
	}
	if !within(c.EndpointCIDRs, e.GetAddress()) {
		return c.deny("endpoint", federation.EndpointKey(e), "address", "%s is outside the cluster's endpoint CIDRs (%s)", e.GetAddress(), prefixList(c.EndpointCIDRs))
	}
	return nil
}

// CheckWorkload checks a workload.
func (c *Cluster) CheckWorkload(w *federationpb.Workload) error {
	if n := w.GetNetwork(); n != "" && !slices.Contains(c.Networks, n) {
		return c.deny("workload", w.GetUid(), "network", "network %q is not one of the cluster's (%s)", n, list(c.Networks))
	}
	for i, ip := range w.GetIps() {
		if !within(c.WorkloadCIDRs, ip) {
			return c.deny("workload", w.GetUid(), fmt.Sprintf("ips[%d]", i), "%s is outside the cluster's workload CIDRs (%s)", ip, prefixList(c.WorkloadCIDRs))
		}
	}
	return nil
}

func (c *Cluster) exports(ns string) bool {
	return c.ExportNamespaces == nil || slices.Contains(c.ExportNamespaces, ns)
}

func (c *Cluster) deny(kind, key, field, format string, args ...any) error {
	return fmt.Errorf("%w (%w)", &federation.ValidationError{
		Kind: kind, Key: key, Field: field, Reason: fmt.Sprintf(format, args...),
	}, federation.ErrNotAllowed)
}

// within reports whether addr is in one of prefixes; nil prefixes admit
// every address.
func within(prefixes []netip.Prefix, addr string) bool {
	if prefixes == nil {
		return true
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
}

func list(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "allowed: " + strings.Join(q, ", ")
}

func prefixList(p []netip.Prefix) string {
	s := make([]string, len(p))
	for i, v := range p {
		s[i] = v.String()
	}
	return strings.Join(s, ", ")
}
