//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
)

// TestKubeImportsWrittenBack: a hub and two real spokes on real API
// servers. East exports demo/echo; the hub's imports reach both spokes,
// which write them into their clusters (a ServiceImport with a
// ClusterSetIP, east's endpoints as an MCS EndpointSlice), report what
// they hold, and east's ServiceExport turns Ready once both hold it.
func TestKubeImportsWrittenBack(t *testing.T) {
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "", ""
	cfg.XDSWarmUp = 0
	h := runHub(t, cfg)
	f := &kubeFleet{hub: h.Hub, clusters: kubetest.Start(t, 2)}
	east, west := f.clusters[0], f.clusters[1]
	kubeEcho(t, east, "z-east", "10.1.0.1", "10.1.0.2")
	_, err := west.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.runSpoke(t, 0, "east", "net1")
	f.runSpoke(t, 1, "west", "net1")

	for _, c := range []struct {
		name string
		*kubetest.Cluster
	}{{"east", east}, {"west", west}} {
		testwait.For(t, c.name+" holds demo/echo with a ClusterSetIP and east's endpoints", func() bool {
			si, err := c.MCS.MulticlusterV1beta1().ServiceImports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(si.Spec.IPs) != 1 || !slices.Equal(clusterNames(si), []string{"east"}) {
				return false
			}
			list, err := c.Client.DiscoveryV1().EndpointSlices("demo").List(t.Context(), metav1.ListOptions{
				LabelSelector: mcsv1beta1.LabelServiceName + "=echo," + mcsv1beta1.LabelSourceCluster + "=east",
			})
			if err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, s := range list.Items {
				for _, e := range s.Endpoints {
					addrs = append(addrs, e.Addresses...)
				}
			}
			slices.Sort(addrs)
			return slices.Equal(addrs, []string{"10.1.0.1", "10.1.0.2"})
		})
	}
	// Both clusters hold east's export: its ServiceExport is Ready.
	testwait.For(t, "east's ServiceExport Ready", func() bool {
		se, err := east.MCS.MulticlusterV1beta1().ServiceExports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := meta.FindStatusCondition(se.Status.Conditions, "Ready")
		conflict := meta.FindStatusCondition(se.Status.Conditions, "Conflict")
		return ready != nil && ready.Status == metav1.ConditionTrue &&
			conflict != nil && conflict.Status == metav1.ConditionFalse
	})

	// The export goes: so do the imports.
	if err := east.MCS.MulticlusterV1beta1().ServiceExports("demo").Delete(t.Context(), "echo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "west's demo/echo removed", func() bool {
		_, err := west.MCS.MulticlusterV1beta1().ServiceImports("demo").Get(t.Context(), "echo", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func clusterNames(si *mcsv1beta1.ServiceImport) []string {
	var out []string
	for _, c := range si.Status.Clusters {
		out = append(out, c.Cluster)
	}
	return out
}
