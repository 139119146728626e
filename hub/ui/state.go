package ui

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub/registry"
)

// State is everything the page shows.
type State struct {
	Now      time.Time `json:"now"`
	Revision uint64    `json:"revision"`
	Networks []Network `json:"networks"`
	Services []Service `json:"services"`
	Proxies  []Proxy   `json:"proxies"`
	// Propagation is the hub's meshfed_propagation_seconds, all types and
	// kinds together.
	Propagation Histogram `json:"propagation"`
}

// Network is one network's clusters and gateways.
type Network struct {
	Name     string    `json:"name"`
	Clusters []Cluster `json:"clusters"`
	Gateways []string  `json:"gateways,omitempty"`
}

// Cluster is one cluster's lease and shard.
type Cluster struct {
	ID        string    `json:"id"`
	State     string    `json:"state"`
	Since     time.Time `json:"since,omitzero"`
	Connected bool      `json:"connected"`
	LastAck   time.Time `json:"lastAck,omitzero"`
	Services  int       `json:"services"`
	Endpoints int       `json:"endpoints"`
	Refused   uint64    `json:"refused,omitempty"`
	Build     string    `json:"build,omitempty"`
}

// Service is one clusterset service.
type Service struct {
	Key           string                 `json:"key"`
	Hostname      string                 `json:"hostname"`
	Clusterset    string                 `json:"clusterset,omitempty"`
	ClustersetIPs []string               `json:"clustersetIPs,omitempty"`
	Conflicts     []string               `json:"conflicts,omitempty"`
	Endpoints     []EndpointsAt          `json:"endpoints"`
	Ready         []federation.ClusterID `json:"ready,omitempty"`
}

// EndpointsAt counts a service's endpoints in one cluster and locality.
type EndpointsAt struct {
	Cluster  string `json:"cluster"`
	Locality string `json:"locality"`
	Stale    bool   `json:"stale,omitempty"`
	Ready    int    `json:"ready"`
	Total    int    `json:"total"`
}

// Proxy is one connected proxy and its sync state per type.
type Proxy struct {
	ID      string            `json:"id"`
	Kind    string            `json:"kind"`
	Cluster string            `json:"cluster,omitempty"`
	Network string            `json:"network,omitempty"`
	Types   map[string]string `json:"types"` // type (its message name) → SYNCED, STALE or NACKED
}

// Histogram is a latency histogram: cumulative counts by upper bound, in
// seconds, and estimated quantiles.
type Histogram struct {
	Count   uint64    `json:"count"`
	Bounds  []float64 `json:"bounds"`
	Buckets []uint64  `json:"buckets"`
	P50     float64   `json:"p50"`
	P99     float64   `json:"p99"`
}

// Inputs are where the hub's state comes from.
type Inputs struct {
	Status  func() []registry.ClusterStatus
	Current func() clusterset.Snapshot
	// Proxies is nil without xDS.
	Proxies func() []Proxy
	// Gather reads the hub's metrics, for the propagation histogram.
	Gather func() ([]*dto.MetricFamily, error)
	Now    func() time.Time
}

// Build returns the hub's state.
func (in Inputs) Build() State {
	snap := in.Current()
	st := State{Now: in.Now(), Revision: snap.Revision(), Networks: []Network{}, Services: []Service{}, Proxies: []Proxy{}}
	byNetwork := map[string]*Network{}
	network := func(name string) *Network {
		if n, ok := byNetwork[name]; ok {
			return n
		}
		n := &Network{Name: name}
		byNetwork[name] = n
		return n
	}
	for _, cs := range in.Status() {
		n := network(cs.Network)
		n.Clusters = append(n.Clusters, Cluster{
			ID: string(cs.ID), State: cs.State.String(), Since: cs.StateSince, Connected: cs.Connected, LastAck: cs.LastAck,
			Services: cs.Services, Endpoints: cs.Endpoints, Refused: cs.PolicyRefusals, Build: cs.Build,
		})
	}
	for _, g := range snap.Gateways().All() {
		n := network(string(g.Into))
		addr := net.JoinHostPort(g.GetAddress(), strconv.Itoa(int(g.GetPort())))
		if !slices.Contains(n.Gateways, addr) {
			n.Gateways = append(n.Gateways, addr)
		}
	}
	for _, n := range byNetwork {
		slices.Sort(n.Gateways)
		st.Networks = append(st.Networks, *n)
	}
	slices.SortFunc(st.Networks, func(a, b Network) int { return cmp.Compare(a.Name, b.Name) })

	for _, v := range snap.Services() {
		imp := snap.Import(v.Key)
		s := Service{Key: v.Key, Hostname: v.Hostname, Clusterset: v.ClustersetHostname, Ready: imp.Ready, Endpoints: []EndpointsAt{}}
		for _, ip := range imp.ClustersetIPs {
			if ip.IsValid() {
				s.ClustersetIPs = append(s.ClustersetIPs, ip.String())
			}
		}
		for _, c := range v.Conflicts {
			s.Conflicts = append(s.Conflicts, c.Reason+": "+c.Message)
		}
		for _, c := range v.Clusters {
			at := map[string]*EndpointsAt{}
			var order []string
			for _, e := range c.Endpoints {
				l := e.GetLocality()
				loc := l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubzone()
				a, ok := at[loc]
				if !ok {
					a = &EndpointsAt{Cluster: string(c.Cluster), Locality: loc, Stale: c.Stale}
					at[loc] = a
					order = append(order, loc)
				}
				a.Total++
				if e.GetReady() {
					a.Ready++
				}
			}
			slices.Sort(order)
			for _, loc := range order {
				s.Endpoints = append(s.Endpoints, *at[loc])
			}
		}
		st.Services = append(st.Services, s)
	}

	if in.Proxies != nil {
		st.Proxies = append(st.Proxies, in.Proxies()...)
	}
	if in.Gather != nil {
		st.Propagation = propagation(in.Gather)
	}
	return st
}

// propagation sums the propagation histogram's series.
func propagation(gather func() ([]*dto.MetricFamily, error)) Histogram {
	families, err := gather()
	if err != nil {
		return Histogram{}
	}
	var h Histogram
	for _, f := range families {
		if f.GetName() != "meshfed_propagation_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			hist := m.GetHistogram()
			h.Count += hist.GetSampleCount()
			for i, b := range hist.GetBucket() {
				if i == len(h.Bounds) {
					h.Bounds = append(h.Bounds, b.GetUpperBound())
					h.Buckets = append(h.Buckets, 0)
				}
				h.Buckets[i] += b.GetCumulativeCount()
			}
		}
	}
	h.P50, h.P99 = h.quantile(0.5), h.quantile(0.99)
	return h
}

// quantile estimates a quantile linearly within its bucket, as
// Prometheus's histogram_quantile does.
func (h Histogram) quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	prevBound, prevCount := 0.0, 0.0
	for i, b := range h.Bounds {
		c := float64(h.Buckets[i])
		if c >= rank {
			if c == prevCount {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = b, c
	}
	return prevBound
}
