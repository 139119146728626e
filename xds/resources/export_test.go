package resources

import (
	"math/rand/v2"
	"net/netip"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// For the external tests, which check the encodings against package
// reference (that imports this one, so tests inside it cannot).

// RandomCase is randomCase.
func RandomCase(r *rand.Rand) (*federation.ServiceView, []*federation.ClusterInfo, View) {
	return randomCase(r)
}

// ServiceFixtures are the services of the golden cases by name, and an
// MCS import whose IPv4 family has no ClusterSetIP (its CIDR exhausted).
func ServiceFixtures() map[string]*federation.ServiceView {
	out := map[string]*federation.ServiceView{}
	for _, c := range goldenCases() {
		out[c.name] = c.service
	}
	exhausted := withClustersetIPs(merged(
		export("east", "net-1", withService(func(s *federationpb.Service) {
			s.Export.Source = federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT
			s.Ports = append(s.Ports, &federationpb.ServicePort{Name: "http", Protocol: tcp, Port: 80})
		}), pod("10.1.0.1", "r1", "z1")),
	), "fd6d:6673:6574::5")
	exhausted.ClustersetIPs = append([]netip.Addr{{}}, exhausted.ClustersetIPs...)
	out["mcs-clusterset-ip-exhausted"] = exhausted
	return out
}
