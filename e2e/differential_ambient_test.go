//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_istiod

package e2e

import (
	"os"
	"testing"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/istiodtest"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/spoke"
)

// TestWorkloadAPIMatchesIstiod is the differential test for ztunnels: on
// the same generated matrix, the ztunnel of an ambient istiod that reads
// the other clusters through remote secrets (Istio's own ambient
// multicluster) and that of one fed by meshfed's remote views must hold
// the same addresses.
func TestWorkloadAPIMatchesIstiod(t *testing.T) {
	istiodtest.RequireBinary(t)
	services := diffMatrix(diffSeed(t), 16)
	for i := range services {
		services[i].dualStack = false // ClusterIPs are fixed, IPv4 only
	}
	// East twice: the reference's, and the one meshfed feeds.
	clusters := kubetest.Start(t, len(diffSites)+1)
	eastRef, eastFed := clusters[0], clusters[len(diffSites)]
	diffSites[0].install(t, eastRef, services, true)
	diffSites[0].install(t, eastFed, services, true)
	for i, s := range diffSites[1:] {
		s.install(t, clusters[i+1], services, true)
		kubeconfig, err := os.ReadFile(clusters[i+1].Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		remoteSecret(t, eastRef, s.id, kubeconfig)
	}

	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = freeAddr(t), "", ""
	h := runHub(t, cfg)
	for i, s := range diffSites {
		c := clusters[i]
		sc := spoke.DefaultConfig()
		sc.ClusterID, sc.Network, sc.InCluster = s.id, s.network, false
		sc.Hub, sc.Insecure = h.FederationAddr().String(), true
		if i == 0 {
			c = eastFed
			withRemoteViews(t, &sc)
		}
		sc.Kubeconfig = c.Kubeconfig
		runSpokeWith(t, sc)
	}
	ref, fed := ztunnelOf(t, eastRef), ztunnelOf(t, eastFed)
	waitAlike(t, ref, fed, "the generated matrix")
	t.Logf("the ztunnels agree: %s", describeZtunnel(fed.State()))
}
