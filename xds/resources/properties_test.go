package resources

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

func hostPort(e *endpointv3.LbEndpoint) string {
	sa := e.GetEndpoint().GetAddress().GetSocketAddress()
	return net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10))
}

func forEachEndpoint(cla *endpointv3.ClusterLoadAssignment, f func(*endpointv3.LocalityLbEndpoints, *endpointv3.LbEndpoint)) {
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			f(l, e)
		}
	}
}

// checkAssignment checks what grpc-go's and Envoy's EDS validation demand,
// plus our ordering and metadata promises.
func checkAssignment(cla *endpointv3.ClusterLoadAssignment) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := cla.ValidateAll(); err != nil {
		fail("ValidateAll: %v", err)
	}
	if cla.GetClusterName() == "" {
		fail("empty cluster_name")
	}
	addrs := map[string]bool{}
	localities := map[string]bool{} // each locality once per priority (grpc-go's rule, gRFC A52)
	prios := map[uint32]bool{}
	var total uint64
	for i, l := range cla.GetEndpoints() {
		loc := l.GetLocality()
		if loc == nil {
			fail("endpoints[%d]: no locality", i)
			continue
		}
		lk := fmt.Sprintf("%s/%s/%s@%d", loc.GetRegion(), loc.GetZone(), loc.GetSubZone(), l.GetPriority())
		if localities[lk] {
			fail("endpoints[%d]: locality %s repeated in a priority", i, lk)
		}
		localities[lk] = true
		prios[l.GetPriority()] = true
		if i > 0 {
			p := cla.GetEndpoints()[i-1]
			pl := Locality{Region: p.GetLocality().GetRegion(), Zone: p.GetLocality().GetZone(), Subzone: p.GetLocality().GetSubZone()}
			if p.GetPriority() > l.GetPriority() || p.GetPriority() == l.GetPriority() &&
				clusterset.CompareLocality(pl, Locality{Region: loc.GetRegion(), Zone: loc.GetZone(), Subzone: loc.GetSubZone()}) >= 0 {
				fail("endpoints[%d]: not sorted by priority and locality", i)
			}
		}
		if len(l.GetLbEndpoints()) == 0 {
			fail("endpoints[%d]: no lb_endpoints", i)
		}
		var sum uint64
		for j, e := range l.GetLbEndpoints() {
			w := e.GetLoadBalancingWeight()
			if w == nil || w.GetValue() == 0 {
				fail("endpoints[%d][%d]: weight %v", i, j, w)
			}
			sum += uint64(w.GetValue())
			hp := hostPort(e)
			if addrs[hp] {
				fail("endpoints[%d][%d]: duplicate address %s", i, j, hp)
			}
			addrs[hp] = true
			if _, err := netip.ParseAddr(e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()); err != nil {
				fail("endpoints[%d][%d]: address: %v", i, j, err)
			}
			if j > 0 {
				prev := l.GetLbEndpoints()[j-1].GetEndpoint().GetAddress().GetSocketAddress()
				cur := e.GetEndpoint().GetAddress().GetSocketAddress()
				if c := strings.Compare(prev.GetAddress(), cur.GetAddress()); c > 0 || c == 0 && prev.GetPortValue() >= cur.GetPortValue() {
					fail("endpoints[%d][%d]: not sorted by address", i, j)
				}
			}
			if h := e.GetHealthStatus().String(); h != "HEALTHY" && h != "DRAINING" {
				fail("endpoints[%d][%d]: health %s", i, j, h)
			}
			md := e.GetMetadata().GetFilterMetadata()[MetadataNamespace].GetFields()
			if _, ok := md["cluster"]; !ok || md["network"] == nil {
				fail("endpoints[%d][%d]: metadata %v", i, j, md)
			}
		}
		if lw := l.GetLoadBalancingWeight().GetValue(); lw == 0 || uint64(lw) != sum {
			fail("endpoints[%d]: locality weight %d, endpoints sum to %d", i, lw, sum)
		}
		total += sum
	}
	for p := range uint32(len(prios)) {
		if !prios[p] {
			fail("priorities %v are not contiguous from 0", slices.Sorted(maps.Keys(prios)))
			break
		}
	}
	if total >= 1<<31 {
		fail("total weight %d >= 2^31", total)
	}
	return errors.Join(errs...)
}

// checkOutput validates every resource and that they reference each other
// the way a proxyless client follows them: LDS → RDS → CDS → EDS.
func checkOutput(t *testing.T, out *output) {
	t.Helper()
	routes, clusters, eds := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, c := range out.clusters {
		if err := c.ValidateAll(); err != nil {
			t.Errorf("cluster %s: %v", c.GetName(), err)
		}
		if c.GetEdsClusterConfig().GetServiceName() != c.GetName() {
			t.Errorf("cluster %s: service_name %q", c.GetName(), c.GetEdsClusterConfig().GetServiceName())
		}
		clusters[c.GetName()] = true
	}
	for _, r := range out.routes {
		if err := r.ValidateAll(); err != nil {
			t.Errorf("route %s: %v", r.GetName(), err)
		}
		routes[r.GetName()] = true
		for _, vh := range r.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				if c := rt.GetRoute().GetCluster(); !clusters[c] {
					t.Errorf("route %s: unknown cluster %q", r.GetName(), c)
				}
			}
		}
	}
	for _, l := range out.listeners {
		if err := l.ValidateAll(); err != nil {
			t.Errorf("listener %s: %v", l.GetName(), err)
		}
		hcm := decodeHCM(t, l)
		if err := hcm.ValidateAll(); err != nil {
			t.Errorf("listener %s: http connection manager: %v", l.GetName(), err)
		}
		if n := hcm.GetRds().GetRouteConfigName(); !routes[n] {
			t.Errorf("listener %s: unknown route config %q", l.GetName(), n)
		}
		if fs := hcm.GetHttpFilters(); len(fs) == 0 || fs[len(fs)-1].GetName() != routerFilterName {
			t.Errorf("listener %s: router filter is not last", l.GetName())
		}
	}
	for _, a := range out.assignments {
		if err := checkAssignment(a.cla); err != nil {
			t.Errorf("view %s: assignment %s: %v", a.view, a.cla.GetClusterName(), err)
		}
		eds[a.cla.GetClusterName()] = true
	}
	if len(out.assignments) > 0 {
		for c := range clusters {
			if !eds[c] {
				t.Errorf("cluster %s has no assignment", c)
			}
		}
	}
}

// FuzzLoadAssignment checks the invariants over random service views.
// Plain `go test` runs the seeds below; `go test -fuzz` explores more.
func FuzzLoadAssignment(f *testing.F) {
	for i := range uint64(100) {
		f.Add(i, i*7919)
	}
	f.Fuzz(func(t *testing.T, seed1, seed2 uint64) {
		r := rand.New(rand.NewPCG(seed1, seed2))
		s, clusters, v := randomCase(r)
		out := serviceOutput(t, s, nil)
		gws := clusterset.NewGateways(clusters)
		for _, h := range Hostnames(s) {
			for _, p := range Ports(s) {
				out.assignments = append(out.assignments, assignment{v.Key(), loadAssignment(t, s, h, p, v, gws)})
			}
		}
		checkOutput(t, out)
		// UDP ports get no clusters, but their assignments are still valid.
		for _, p := range s.Ports {
			cla := loadAssignment(t, s, s.Hostname, p, v, gws)
			if err := checkAssignment(cla); err != nil {
				t.Errorf("port %d: %v", p.GetPort(), err)
			}
			checkSplitHorizon(t, cla, v)
		}
	})
}

// checkSplitHorizon checks that only the view's network's pods and
// gateways appear, and that weights are uniform where they should be.
func checkSplitHorizon(t *testing.T, cla *endpointv3.ClusterLoadAssignment, v View) {
	t.Helper()
	localWeight := uint32(0)
	gatewayWeight := map[string]uint32{}
	forEachEndpoint(cla, func(_ *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
		addr := netip.MustParseAddr(e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		md := e.GetMetadata().GetFilterMetadata()[MetadataNamespace].GetFields()
		network := md["network"].GetStringValue()
		w := e.GetLoadBalancingWeight().GetValue()
		if gatewayRange.Contains(addr) {
			if network == string(v.Network) {
				t.Errorf("gateway %s leads to the proxy's own network %q", hostPort(e), network)
			}
			if gw, ok := gatewayWeight[network]; ok && gw != w {
				t.Errorf("gateways of %q have unequal weights %d and %d", network, gw, w)
			}
			gatewayWeight[network] = w
			return
		}
		if !podRange(v.Network).Contains(addr) || network != string(v.Network) {
			t.Errorf("%s (network %q) is not on the proxy's network %q", hostPort(e), network, v.Network)
		}
		if localWeight != 0 && localWeight != w {
			t.Errorf("local endpoints have unequal weights %d and %d", localWeight, w)
		}
		localWeight = w
	})
}

var (
	randomNetworks = []federation.NetworkID{"", "n1", "n2", "n3"}
	gatewayRange   = netip.MustParsePrefix("192.0.2.0/24")
)

// podRange is where randomCase puts the pods of a network: 10.<i>.0.0/16,
// so that a pod address shows which network it is on.
func podRange(n federation.NetworkID) netip.Prefix {
	i := slices.Index(randomNetworks, n)
	if i < 0 {
		i = 99
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// randomCase builds a random but plausible clusterset: a few clusters on a
// few networks, overlapping pod addresses within a network, every
// readiness state, missing ports, gateways of both protocols, DNS-named
// and duplicated gateways, stale clusters, and a random proxy view.
func randomCase(r *rand.Rand) (*clusterset.ServiceView, []*clusterset.ClusterInfo, View) {
	svcPorts := []*federationpb.ServicePort{
		{Name: "grpc", Protocol: tcp, Port: 8080},
		{Name: "http", Port: 80},
		{Name: "dns", Protocol: udp, Port: 53},
		{Name: "alt", Protocol: tcp, Port: 8080}, // clashes with grpc by number
	}
	epPorts := []*federationpb.EndpointPort{
		{Name: "grpc", Protocol: tcp, Port: 9090},
		{Name: "http", Protocol: tcp, Port: 8000},
		{Name: "dns", Protocol: udp, Port: 5353},
		{Name: "alt", Protocol: tcp, Port: 9091},
	}
	locality := func() *federationpb.Locality {
		return &federationpb.Locality{Region: pick(r, "r1", "r2", ""), Zone: pick(r, "z1", "z2", ""), Subzone: pick(r, "", "", "s1")}
	}
	var parts []clusterset.ClusterService
	var infos []*clusterset.ClusterInfo
	for c := range 1 + r.IntN(4) {
		id := federation.ClusterID(fmt.Sprintf("c%d", c))
		network := pick(r, randomNetworks...)
		svc := baseService()
		svc.Ports = nil
		for _, p := range svcPorts {
			if r.IntN(2) == 0 {
				svc.Ports = append(svc.Ports, p)
			}
		}
		if r.IntN(3) == 0 {
			svc.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT
		}
		if r.IntN(5) == 0 {
			svc.Type = federationpb.ServiceType_SERVICE_TYPE_HEADLESS
		}
		var eps []*federationpb.Endpoint
		for range r.IntN(25) {
			epNetwork := network
			if r.IntN(8) == 0 {
				// An override; "" would mean "the cluster's network".
				epNetwork = cmp.Or(pick(r, randomNetworks...), network)
			}
			base := podRange(epNetwork).Addr().As4()
			addr := netip.AddrFrom4([4]byte{base[0], base[1], byte(r.IntN(2)), byte(1 + r.IntN(12))}).String()
			e := pod(addr, "", "")
			e.Locality = locality()
			if epNetwork != network {
				e.Network = string(epNetwork)
			}
			e.Ports = nil
			for _, p := range epPorts {
				if r.IntN(3) > 0 {
					e.Ports = append(e.Ports, p)
				}
			}
			if r.IntN(6) == 0 {
				e.Ports = []*federationpb.EndpointPort{{Protocol: tcp, Port: 7000}}
			}
			pick(r, func(*federationpb.Endpoint) {}, notReady, terminating, terminated)(e)
			eps = append(eps, e)
		}
		part := export(id, network, svc, eps...)
		part.Stale = r.IntN(4) == 0
		parts = append(parts, part)
		info := cluster(id, network)
		for range r.IntN(4) {
			g := gateway(pick(r, "192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "gw.example.com"), pick[uint32](r, 15443, 15008), pick(r, tls, hbon))
			if r.IntN(6) == 0 {
				g.Network = string(pick(r, randomNetworks...))
			}
			info.Gateways = append(info.Gateways, g)
		}
		infos = append(infos, info)
	}
	l := locality()
	v := View{Network: pick(r, append(randomNetworks, "n9")...), Locality: Locality{Region: l.GetRegion(), Zone: l.GetZone(), Subzone: l.GetSubzone()}}
	return merged(parts...), infos, v
}

// TestWeightCap: when the LCM of the gateway counts would push the total
// weight past 2^31, weights are capped and rounded up, and every invariant
// still holds.
func TestWeightCap(t *testing.T) {
	svc := baseService()
	var local []*federationpb.Endpoint
	for i := range 10 {
		local = append(local, pod(fmt.Sprintf("10.0.0.%d", i+1), "r1", "z1"))
	}
	parts := []clusterset.ClusterService{export("local", "net-0", svc, local...)}
	infos := []*clusterset.ClusterInfo{cluster("local", "net-0")}
	counts := []int{37, 41, 43, 47, 53} // pairwise coprime: LCM 162,490,421
	for i, n := range counts {
		id := federation.ClusterID(fmt.Sprintf("c%d", i))
		network := federation.NetworkID(fmt.Sprintf("net-%d", i+1))
		parts = append(parts, export(id, network, svc, pod(fmt.Sprintf("10.%d.0.1", i+1), "r1", "z2"), pod(fmt.Sprintf("10.%d.0.2", i+1), "r2", "z1")))
		info := cluster(id, network)
		for g := range n {
			info.Gateways = append(info.Gateways, gateway(fmt.Sprintf("192.0.%d.%d", i+10, g+1), 15443, tls))
		}
		infos = append(infos, info)
	}
	s := merged(parts...)
	v := view("net-0", "r1", "z1", "")
	cla := loadAssignment(t, s, s.Hostname, grpcPort(), v, clusterset.NewGateways(infos))
	if err := checkAssignment(cla); err != nil {
		t.Fatal(err)
	}
	// 20 units in all, times the LCM, is over 2^31: the scale is the largest
	// that keeps the sum below 2^31.
	scale := uint64(maxTotalWeight-(37+41+43+47+53)) / 20
	if scale >= 162490421 {
		t.Fatalf("the test does not reach the cap")
	}
	perNetwork := map[string]uint64{}
	forEachEndpoint(cla, func(_ *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
		n := e.GetMetadata().GetFilterMetadata()[MetadataNamespace].GetFields()["network"].GetStringValue()
		perNetwork[n] += uint64(e.GetLoadBalancingWeight().GetValue())
	})
	for i, n := range counts {
		got := perNetwork[fmt.Sprintf("net-%d", i+1)]
		// Two endpoints' worth, each gateway rounded up by less than 1.
		if want := 2 * scale; got < want || got >= want+uint64(n) {
			t.Errorf("net-%d: total gateway weight %d, want [%d, %d)", i+1, got, want, want+uint64(n))
		}
	}
	if got := perNetwork["net-0"]; got != 10*scale {
		t.Errorf("local weight %d, want %d", got, 10*scale)
	}
	checkSplitHorizonPrefix(t, cla, netip.MustParsePrefix("10.0.0.0/16"))
}

// checkSplitHorizonPrefix checks that pod addresses come only from local.
func checkSplitHorizonPrefix(t *testing.T, cla *endpointv3.ClusterLoadAssignment, local netip.Prefix) {
	t.Helper()
	forEachEndpoint(cla, func(_ *endpointv3.LocalityLbEndpoints, e *endpointv3.LbEndpoint) {
		a := netip.MustParseAddr(e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		if a.Is4() && a.As4()[0] == 10 && !local.Contains(a) {
			t.Errorf("remote pod %s visible", hostPort(e))
		}
	})
}

// TestAssignmentKey checks what the hub relies on to share assignments
// between views: views with one assignment key get equal assignments. The
// second view of each case is another random one, a locality of one of
// the service's endpoints, or the first's region with another zone, so
// that keys often match, some of them for views that rank the localities
// differently in the same order.
func TestAssignmentKey(t *testing.T) {
	const cases = 900
	same, renumbered, proxyless, mixed := 0, 0, 0, 0
	for seed := range uint64(cases) {
		r := rand.New(rand.NewPCG(seed, seed*31))
		s, clusters, v1 := randomCase(r)
		_, _, v2 := randomCase(r)
		locs := Localities(s)
		switch {
		case r.IntN(3) == 0:
			// another random view
		case len(locs) > 0 && r.IntN(2) == 0:
			v2 = View{Network: v1.Network, Locality: pick(r, locs...)}
		case r.IntN(2) == 0:
			// The same region, with no zone or one of no endpoint: the
			// region's localities rank otherwise, in the same order.
			v2 = View{Network: v1.Network, Locality: Locality{Region: v1.Locality.Region, Zone: pick(r, "", "no-endpoint-here")}}
		default:
			v2 = v1
			v2.Locality.Subzone = pick(r, "", "s1", "s2")
		}
		// Either may be a gRPC client: its key is an Envoy's unless the
		// service has draining endpoints.
		// (Drawn from a generator of their own: the cases stay those of
		// the seed.)
		pr := rand.New(rand.NewPCG(seed, seed*37))
		v1.Proxyless, v2.Proxyless = pr.IntN(2) == 0, pr.IntN(2) == 0
		if v1.Proxyless != v2.Proxyless {
			proxyless++
		}
		if !slices.IsSortedFunc(locs, clusterset.CompareLocality) {
			t.Fatalf("seed %d: Localities not sorted: %v", seed, locs)
		}
		if assignmentKey(s, locs, v1) != assignmentKey(s, locs, v2) {
			continue
		}
		if v1.Proxyless != v2.Proxyless {
			mixed++
		}
		same++
		if !slices.Equal(ranks(locs, v1), ranks(locs, v2)) {
			renumbered++
		}
		gws := clusterset.NewGateways(clusters)
		for _, h := range Hostnames(s) {
			for _, p := range Ports(s) {
				a, b := loadAssignment(t, s, h, p, v1, gws), loadAssignment(t, s, h, p, v2, gws)
				if !proto.Equal(a, b) {
					t.Errorf("seed %d: views %+v and %+v share key %q but get different assignments:\n%v\n%v",
						seed, v1, v2, assignmentKey(s, locs, v1), a, b)
				}
			}
		}
	}
	if same < 100 || renumbered < 20 || mixed < 3 {
		t.Errorf("%d of %d cases had views with one key, %d of them ranking the localities differently, %d a gRPC client's and an Envoy's (of %d such pairs): the test checks too little",
			same, cases, renumbered, mixed, proxyless)
	}
}

func assignmentKey(s *clusterset.ServiceView, locs []Locality, view View) string {
	return string(AppendAssignmentKey(nil, locs, HasDraining(s), view))
}

// ranks returns the view's rank of each locality, before renumbering.
func ranks(locs []Locality, view View) []int {
	b := builder{view: view}
	out := make([]int, len(locs))
	for i, l := range locs {
		out[i] = b.rank(l)
	}
	return out
}
