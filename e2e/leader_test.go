//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_memory

package e2e

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/hub/registry"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/spoke"
)

// TestKubeLeaderElection runs two spokes for one cluster under
// --leader-elect: only the Lease's holder streams to the hub and writes
// into the cluster, the standby's writes wait, and when the leader stops
// the standby takes over at its next try, without the hub's view of the
// cluster changing on the way.
func TestKubeLeaderElection(t *testing.T) {
	f := startKubeFleet(t, 1)
	c := f.clusters[0]
	ctx := t.Context()
	kubeEcho(t, c, "z1", "10.1.0.1", "10.1.0.2")
	// A slice the spokes reject (a port out of range): each records an
	// Event on it, which shows who writes into the cluster.
	_, err := c.Client.DiscoveryV1().EndpointSlices("demo").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-bad", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](70000), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshfed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	holder := func() string {
		l, err := c.Client.CoordinationV1().Leases("meshfed").Get(ctx, "meshfed-spoke", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	events := func() int {
		list, err := c.Client.CoreV1().Events("demo").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=echo-bad"})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	reg := f.hub.Registry()
	status := func() registry.ClusterStatus {
		for _, s := range reg.Status() {
			if s.ID == "east" {
				return s
			}
		}
		return registry.ClusterStatus{}
	}

	a := runElectingSpoke(t, f, "spoke-a")
	testwait.For(t, "spoke-a to hold the lease", func() bool { return holder() == "spoke-a" })
	synced := await(t, reg, "spoke-a's full state", func(s clusterset.Snapshot) bool {
		return len(endpointsOf(s, "demo/echo", "east")) == 2
	})
	testwait.For(t, "spoke-a's Event on the rejected slice", func() bool { return events() == 1 })

	b := runElectingSpoke(t, f, "spoke-b")
	testwait.For(t, "spoke-b to be ready as a standby, its write held", func() bool {
		return b.s.Ready() && b.logged("write held until this spoke leads")
	})
	if got := holder(); got != "spoke-a" {
		t.Fatalf("the lease's holder is %q with spoke-b standing by, want spoke-a", got)
	}
	if n := events(); n != 1 {
		t.Errorf("%d Events on the rejected slice while spoke-b stands by, want spoke-a's alone", n)
	}
	if st := status(); !st.Connected || st.Supersessions != 0 || st.DuplicateRefusals != 0 {
		t.Errorf("hub status %+v; want one spoke streaming for east, never two", st)
	}

	a.stop()
	stopped := time.Now()
	testwait.For(t, "spoke-b to hold the lease", func() bool { return holder() == "spoke-b" })
	tookOver := time.Since(stopped)
	testwait.For(t, "spoke-b's stream acknowledged by the hub", func() bool {
		st := status()
		return st.Connected && st.ConnectedSince.After(stopped) && st.LastAck.After(st.ConnectedSince)
	})
	t.Logf("spoke-b held the lease %v and streamed %v after spoke-a stopped (retry period 250ms)",
		tookOver.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	if st := status(); st.Supersessions != 0 || st.DuplicateRefusals != 0 {
		t.Errorf("hub status %+v: the two spokes' streams overlapped", st)
	}
	for s := synced; s != nil; s = s.Next() {
		if n := len(endpointsOf(s, "demo/echo", "east")); n != 2 {
			t.Fatalf("revision %d shows %d endpoints of east during the takeover, want 2 throughout", s.Revision(), n)
		}
		if info, ok := s.Cluster("east"); !ok || info.State != clusterset.Live {
			t.Fatalf("revision %d shows east %+v during the takeover, want it live throughout", s.Revision(), info)
		}
	}
	// What spoke-b held goes out once it leads: its own Event.
	testwait.For(t, "spoke-b's held Event", func() bool { return events() == 2 })
}

// electingSpoke is a spoke under --leader-elect whose log is kept.
type electingSpoke struct {
	s    *spoke.Spoke
	stop func()
	log  *logMessages
}

func (e *electingSpoke) logged(msg string) bool { return e.log.has(msg) }

// runElectingSpoke runs a spoke for cluster east with leader election on
// the Lease meshfed/meshfed-spoke, as identity, until stop is called or
// the test ends. Its lease timings are short, for a quick takeover.
func runElectingSpoke(t *testing.T, f *kubeFleet, identity string) *electingSpoke {
	t.Helper()
	cfg := spoke.DefaultConfig()
	cfg.ClusterID, cfg.Network, cfg.Kubeconfig, cfg.InCluster = "east", "net-east", f.clusters[0].Kubeconfig, false
	cfg.Hub, cfg.Insecure = f.hub.FederationAddr().String(), true
	le := &cfg.LeaderElection
	le.Enabled, le.Namespace, le.Identity = true, "meshfed", identity
	le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = 3*time.Second, 2*time.Second, 250*time.Millisecond
	msgs := &logMessages{}
	s, err := spoke.New(t.Context(), cfg, slog.New(msgs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("spoke %s: %v", identity, err)
			}
		})
	}
	t.Cleanup(stop)
	return &electingSpoke{s: s, stop: stop, log: msgs}
}

// logMessages is a slog handler that keeps the messages logged, at every
// level.
type logMessages struct {
	mu   sync.Mutex
	msgs map[string]bool
}

func (m *logMessages) Enabled(context.Context, slog.Level) bool { return true }

func (m *logMessages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.msgs == nil {
		m.msgs = map[string]bool{}
	}
	m.msgs[r.Message] = true
	return nil
}

func (m *logMessages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *logMessages) WithGroup(string) slog.Handler      { return m }

func (m *logMessages) has(msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.msgs[msg]
}
