package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/federation"
)

// MaxFileBytes bounds a policy file: one entry per cluster of a fleet of
// thousands fits in a few MiB.
const MaxFileBytes = 8 << 20

// maxListLen bounds each list of an entry, so that checking one object
// stays cheap.
const maxListLen = 256

// DefaultGatewayNamespace is where a cluster's east-west gateways may be
// unless its entry says otherwise: the spoke's default system namespace.
const DefaultGatewayNamespace = "istio-system"

// File is the policy file as written: YAML (or JSON), one entry per
// cluster.
type File struct {
	Clusters []Entry `json:"clusters"`
}

// Entry is one cluster's policy.
type Entry struct {
	// ID is the cluster ID, as in its spoke's certificate.
	ID string `json:"id"`
	// Networks the cluster's shard may name: its own network, its
	// endpoints' and workloads' networks, and the networks its gateways
	// front. At least one; "" is the unnamed network of a cluster whose
	// spoke has no --network.
	Networks []string `json:"networks"`
	// TrustDomains the cluster's workloads may be in (default: the hub's
	// --trust-domain).
	TrustDomains []string `json:"trustDomains,omitempty"`
	// ExportNamespaces the cluster may export services and endpoints from
	// (default: all).
	ExportNamespaces []string `json:"exportNamespaces,omitempty"`
	// GatewayNamespaces its east-west gateway Services may be in
	// (default: istio-system).
	GatewayNamespaces []string `json:"gatewayNamespaces,omitempty"`
	// CIDRs its addresses must fall in; a list left out admits any.
	CIDRs CIDRs `json:"cidrs,omitzero"`
	// Limits override the hub's per-cluster caps.
	Limits Limits `json:"limits,omitzero"`
	// Leases override the hub's lease policy.
	Leases Leases `json:"leases,omitzero"`
}

// CIDRs are the address ranges of a cluster, by what the address is of.
type CIDRs struct {
	Endpoints []string `json:"endpoints,omitempty"`
	Workloads []string `json:"workloads,omitempty"`
	Gateways  []string `json:"gateways,omitempty"`
}

// Limits are caps on a cluster's shard; nil keeps the hub's, 0 is no cap.
type Limits struct {
	MaxServices  *int `json:"maxServices,omitempty"`
	MaxEndpoints *int `json:"maxEndpoints,omitempty"`
	MaxWorkloads *int `json:"maxWorkloads,omitempty"`
}

// Leases say how long a cluster whose spoke has gone is served; nil keeps
// the hub's.
type Leases struct {
	StaleAfter    *Duration `json:"staleAfter,omitempty"`
	WithdrawAfter *Duration `json:"withdrawAfter,omitempty"`
}

// Duration is a time.Duration written as Go writes it ("30s", "10m").
type Duration struct{ time.Duration }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\" or \"10m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	d.Duration = v
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Policy is a parsed, checked policy file. It is immutable.
type Policy struct {
	clusters map[federation.ClusterID]*Cluster
	ids      []federation.ClusterID // sorted
}

// Cluster is one cluster's rules, as the hub applies them.
type Cluster struct {
	ID                federation.ClusterID
	Networks          []string
	TrustDomains      []string
	ExportNamespaces  []string // nil: all
	GatewayNamespaces []string
	EndpointCIDRs     []netip.Prefix // nil: any address
	WorkloadCIDRs     []netip.Prefix
	GatewayCIDRs      []netip.Prefix
	Limits            Limits
	Leases            Leases
}

// Parse reads a policy file. defaultTrustDomain is the hub's
// --trust-domain, the trust domain of an entry that names none. Errors
// name the entry and field, and wrap federation.ErrInvalid.
func Parse(data []byte, defaultTrustDomain string) (*Policy, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: policy file: %d bytes is more than %d", federation.ErrInvalid, len(data), MaxFileBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// Most likely a file caught mid-write: refusing every cluster
		// on it would cut the whole clusterset off.
		return nil, fmt.Errorf("%w: policy file is empty (to admit no cluster, write clusters: [])", federation.ErrInvalid)
	}
	var f File
	// Strict: a misspelt field ("gatewayNamespace") must not silently
	// leave a cluster with the default.
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: policy file: %w", federation.ErrInvalid, err)
	}
	if f.Clusters == nil {
		return nil, fmt.Errorf("%w: policy file: no clusters: list (a policy that names no cluster admits none)", federation.ErrInvalid)
	}
	p := &Policy{clusters: make(map[federation.ClusterID]*Cluster, len(f.Clusters))}
	for i, e := range f.Clusters {
		c, err := compile(e, defaultTrustDomain)
		if err != nil {
			return nil, fmt.Errorf("%w: policy file: clusters[%d] (%q): %w", federation.ErrInvalid, i, e.ID, err)
		}
		if _, dup := p.clusters[c.ID]; dup {
			return nil, fmt.Errorf("%w: policy file: clusters[%d]: cluster %q is listed twice", federation.ErrInvalid, i, e.ID)
		}
		p.clusters[c.ID] = c
		p.ids = append(p.ids, c.ID)
	}
	slices.Sort(p.ids)
	return p, nil
}

func compile(e Entry, defaultTrustDomain string) (*Cluster, error) {
	if errs := validation.IsDNS1123Label(e.ID); len(errs) > 0 {
		return nil, fmt.Errorf("id: %s", strings.Join(errs, "; "))
	}
	c := &Cluster{ID: federation.ClusterID(e.ID), Limits: e.Limits, Leases: e.Leases}
	var err error
	if len(e.Networks) == 0 {
		return nil, errors.New("networks: at least one network is required")
	}
	if c.Networks, err = names("networks", e.Networks, labelValue); err != nil {
		return nil, err
	}
	tds := e.TrustDomains
	if len(tds) == 0 {
		tds = []string{defaultTrustDomain}
	}
	if c.TrustDomains, err = names("trustDomains", tds, validation.IsDNS1123Subdomain); err != nil {
		return nil, err
	}
	if len(e.ExportNamespaces) > 0 {
		if c.ExportNamespaces, err = names("exportNamespaces", e.ExportNamespaces, namespace); err != nil {
			return nil, err
		}
	}
	gws := e.GatewayNamespaces
	if len(gws) == 0 {
		gws = []string{DefaultGatewayNamespace}
	}
	if c.GatewayNamespaces, err = names("gatewayNamespaces", gws, namespace); err != nil {
		return nil, err
	}
	for _, l := range []struct {
		field string
		in    []string
		out   *[]netip.Prefix
	}{
		{"cidrs.endpoints", e.CIDRs.Endpoints, &c.EndpointCIDRs},
		{"cidrs.workloads", e.CIDRs.Workloads, &c.WorkloadCIDRs},
		{"cidrs.gateways", e.CIDRs.Gateways, &c.GatewayCIDRs},
	} {
		if *l.out, err = prefixes(l.field, l.in); err != nil {
			return nil, err
		}
	}
	for _, l := range []struct {
		field string
		v     *int
	}{
		{"limits.maxServices", e.Limits.MaxServices},
		{"limits.maxEndpoints", e.Limits.MaxEndpoints},
		{"limits.maxWorkloads", e.Limits.MaxWorkloads},
	} {
		if l.v != nil && *l.v < 0 {
			return nil, fmt.Errorf("%s: %d is negative (0 is no cap)", l.field, *l.v)
		}
	}
	if s, w := e.Leases.StaleAfter, e.Leases.WithdrawAfter; s != nil && w != nil && w.Duration != 0 && w.Duration < s.Duration {
		return nil, fmt.Errorf("leases: withdrawAfter %v comes before staleAfter %v", w.Duration, s.Duration)
	}
	return c, nil
}

func names(field string, in []string, check func(string) []string) ([]string, error) {
	if len(in) > maxListLen {
		return nil, fmt.Errorf("%s: %d entries is more than %d", field, len(in), maxListLen)
	}
	out := make([]string, 0, len(in))
	for i, s := range in {
		if errs := check(s); len(errs) > 0 {
			return nil, fmt.Errorf("%s[%d]: %q: %s", field, i, s, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func prefixes(field string, in []string) ([]netip.Prefix, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if len(in) > maxListLen {
		return nil, fmt.Errorf("%s: %d entries is more than %d", field, len(in), maxListLen)
	}
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("%s[%d]: %q has host bits set (did you mean %s?)", field, i, s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

func labelValue(s string) []string { return validation.IsValidLabelValue(s) }

func namespace(s string) []string { return validation.IsDNS1123Label(s) }

// Cluster returns the rules of a cluster, or nil when the policy does not
// name it.
func (p *Policy) Cluster(id federation.ClusterID) *Cluster { return p.clusters[id] }

// Clusters returns the IDs of the clusters the policy names, sorted.
func (p *Policy) Clusters() []federation.ClusterID { return slices.Clone(p.ids) }

// TrustDomains returns every trust domain some cluster may use, sorted.
func (p *Policy) TrustDomains() []string {
	var out []string
	for _, c := range p.clusters {
		for _, td := range c.TrustDomains {
			if !slices.Contains(out, td) {
				out = append(out, td)
			}
		}
	}
	slices.Sort(out)
	return out
}
