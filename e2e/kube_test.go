//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/hub"
	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke"
)

// kubeFleet is a hub and one spoke per real API server.
type kubeFleet struct {
	hub      *hub.Hub
	clusters []*kubetest.Cluster
}

func startKubeFleet(t *testing.T, n int) *kubeFleet {
	t.Helper()
	cfg := hub.DefaultConfig()
	cfg.Insecure = true
	cfg.FederationAddr, cfg.XDSAddr, cfg.DebugAddr = "127.0.0.1:0", "", ""
	h, err := hub.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, h.Run)
	return &kubeFleet{hub: h, clusters: kubetest.Start(t, n)}
}

// runSpoke runs a spoke on a cluster's API server until the returned stop
// is called (or the test ends).
func (f *kubeFleet) runSpoke(t *testing.T, i int, id, network string) (stop func()) {
	t.Helper()
	cfg := spoke.DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Kubeconfig, cfg.InCluster = id, network, f.clusters[i].Kubeconfig, false
	cfg.Hub, cfg.Insecure = f.hub.FederationAddr().String(), true
	return runSpokeWith(t, cfg)
}

func endpointField(s clusterset.Snapshot, cluster federation.ClusterID, addr string, field func(clusterset.TaggedEndpoint) string) string {
	v, ok := s.Service("demo/echo")
	if !ok {
		return ""
	}
	for _, c := range v.Clusters {
		for _, e := range c.Endpoints {
			if c.Cluster == cluster && e.GetAddress() == addr {
				return field(e)
			}
		}
	}
	return ""
}

func TestKubeTwoClustersConverge(t *testing.T) {
	f := startKubeFleet(t, 2)
	kubeEcho(t, f.clusters[0], "z-east", "10.1.0.1", "10.1.0.2")
	kubeEcho(t, f.clusters[1], "z-west", "10.2.0.1")
	f.runSpoke(t, 0, "east", "net-east")
	f.runSpoke(t, 1, "west", "net-west")
	reg := f.hub.Registry()
	ctx := t.Context()

	s := await(t, reg, "both clusters' endpoints", func(s clusterset.Snapshot) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == 2 && len(endpointsOf(s, "demo/echo", "west")) == 1
	})
	if got := endpointField(s, "west", "10.2.0.1", func(e clusterset.TaggedEndpoint) string {
		return string(e.Network) + "|" + e.GetLocality().GetZone()
	}); got != "net-west|z-west" {
		t.Errorf("west endpoint network|zone = %q", got)
	}
	if s.WorkloadCount() != 3 {
		t.Errorf("%d workloads, want 3", s.WorkloadCount())
	}

	// The spoke reports the export valid on the ServiceExport.
	east := f.clusters[0]
	testwait.For(t, "the ServiceExport's Valid condition", func() bool {
		se, err := east.MCS.MulticlusterV1alpha1().ServiceExports("demo").Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range se.Status.Conditions {
			if c.Type == "Valid" && c.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	})

	// A node moves to another zone.
	node, err := east.Client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels["topology.kubernetes.io/zone"] = "z-other"
	if _, err := east.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, reg, "the node's new zone", func(s clusterset.Snapshot) bool {
		return endpointField(s, "east", "10.1.0.1", func(e clusterset.TaggedEndpoint) string { return e.GetLocality().GetZone() }) == "z-other"
	})

	// A pod turns not ready.
	pod, err := east.Client.CoreV1().Pods("demo").Get(ctx, "echo-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if _, err := east.Client.CoreV1().Pods("demo").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, reg, "the pod not ready", func(s clusterset.Snapshot) bool {
		for _, w := range s.Workloads() {
			if w.Cluster == "east" && w.GetName() == "echo-a" {
				return !w.GetReady()
			}
		}
		return false
	})

	// The EndpointSlice splits in two: the endpoints stay, in every
	// snapshot from here on (checked after the next step).
	beforeSplit := reg.Current()
	slice, err := east.Client.DiscoveryV1().EndpointSlices("demo").Get(ctx, "echo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second := slice.DeepCopy()
	second.ObjectMeta = metav1.ObjectMeta{Name: "echo-2", Namespace: "demo", Labels: slice.Labels}
	second.Endpoints = slice.Endpoints[1:]
	slice.Endpoints = slice.Endpoints[:1]
	if _, err := east.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := east.Client.DiscoveryV1().EndpointSlices("demo").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The namespace moves to another network.
	ns, err := east.Client.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"topology.istio.io/network": "net-moved"}
	if _, err := east.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := await(t, reg, "the namespace's network", func(s clusterset.Snapshot) bool {
		return endpointField(s, "east", "10.1.0.2", func(e clusterset.TaggedEndpoint) string { return string(e.Network) }) == "net-moved"
	})
	for s := beforeSplit; s != nil && s.Revision() <= moved.Revision(); s = s.Next() {
		if got := endpointsOf(s, "demo/echo", "east"); !slices.Equal(got, []string{"10.1.0.1", "10.1.0.2"}) {
			t.Fatalf("revision %d shows east endpoints %v while the slice split; want both throughout", s.Revision(), got)
		}
	}

	// Unexport: east's part of echo leaves the clusterset.
	if err := east.MCS.MulticlusterV1alpha1().ServiceExports("demo").Delete(ctx, "echo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, reg, "east unexported", func(s clusterset.Snapshot) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == 0 && len(endpointsOf(s, "demo/echo", "west")) == 1
	})
}

func TestKubeRestarts(t *testing.T) {
	f := startKubeFleet(t, 1)
	kubeEcho(t, f.clusters[0], "z1", "10.1.0.1", "10.1.0.2")
	stop := f.runSpoke(t, 0, "east", "net-east")
	reg := f.hub.Registry()
	synced := await(t, reg, "the first spoke's sync", func(s clusterset.Snapshot) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == 2
	})

	// The spoke restarts: its full state must not remove and re-add
	// anything.
	stop()
	f.runSpoke(t, 0, "east", "net-east")
	testwait.For(t, "the restarted spoke to be connected and acked", func() bool {
		st := reg.Status()
		return len(st) == 1 && st[0].Connected && st[0].ShardVersion >= 1 && st[0].Session != "" && st[0].LastAck.After(st[0].ConnectedSince)
	})
	for s := synced; s != nil; s = s.Next() {
		if n := len(endpointsOf(s, "demo/echo", "east")); n != 2 {
			t.Fatalf("revision %d shows %d endpoints during the spoke's restart, want 2 throughout", s.Revision(), n)
		}
	}

	// The API server restarts under the running spoke: it recovers and
	// follows later changes.
	c := f.clusters[0]
	c.Restart(t)
	pod, err := c.Client.CoreV1().Pods("demo").Get(t.Context(), "echo-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if _, err := c.Client.CoreV1().Pods("demo").UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, reg, "a change after the API server restarted", func(s clusterset.Snapshot) bool {
		for _, w := range s.Workloads() {
			if w.GetName() == "echo-b" {
				return !w.GetReady()
			}
		}
		return false
	})
}
