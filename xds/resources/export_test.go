package resources

import (
	"math/rand/v2"
	"net/netip"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// For the external tests, which check the encodings against package
// reference (that imports this one, so tests inside it cannot).

// RandomCase is randomCase.
func RandomCase(r *rand.Rand) (*clusterset.ServiceView, []*clusterset.ClusterInfo, View) {
	return randomCase(r)
}

// ServiceFixture is a golden case's service and the ClusterSetIPs of its
// import.
type ServiceFixture struct {
	Service *clusterset.ServiceView
	VIPs    []netip.Addr
}

// ServiceFixtures are the services of the golden cases by name, and an
// MCS import whose IPv4 family has no ClusterSetIP (its CIDR exhausted).
func ServiceFixtures() map[string]ServiceFixture {
	out := map[string]ServiceFixture{}
	for _, c := range goldenCases() {
		out[c.name] = ServiceFixture{c.service, c.vips}
	}
	exhausted := merged(
		export("east", "net-1", withService(func(s *federationpb.Service) {
			s.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT
			s.Ports = append(s.Ports, &federationpb.ServicePort{Name: "http", Protocol: tcp, Port: 80})
		}), pod("10.1.0.1", "r1", "z1")),
	)
	out["mcs-clusterset-ip-exhausted"] = ServiceFixture{exhausted, append([]netip.Addr{{}}, addrs("fd6d:6673:6574::5")...)}
	return out
}
