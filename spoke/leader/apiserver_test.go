package leader

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshfed/meshfed/internal/kubetest"
	"github.com/meshfed/meshfed/internal/testwait"
)

// TestElectorsOnAPIServer: two electors on a real API server's Lease,
// through the REST lease client: one leads at a time, and when the leader
// stops, the other takes over at its next try.
func TestElectorsOnAPIServer(t *testing.T) {
	c := kubetest.Start(t, 1)[0]
	if _, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshfed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := NewLeaseClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	type runner struct {
		e      *Elector
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) *runner {
		cfg := testConfig(id)
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 2*time.Second, 250*time.Millisecond
		e, err := NewElector(cfg, client, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		r := &runner{e: e, cancel: cancel, done: make(chan error, 1)}
		go func() {
			r.done <- e.Run(ctx, func(ctx context.Context) error {
				<-ctx.Done()
				return nil
			})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-r.done; err != nil {
				t.Errorf("elector %s: %v", id, err)
			}
		})
		return r
	}
	a, b := start("a"), start("b")
	var leader, standby *runner
	testwait.For(t, "one elector to lead", func() bool {
		if a.e.Leading() && b.e.Leading() {
			t.Fatal("both electors lead")
		}
		switch {
		case a.e.Leading():
			leader, standby = a, b
		case b.e.Leading():
			leader, standby = b, a
		}
		return leader != nil
	})
	lease, err := c.Client.CoordinationV1().Leases("meshfed").Get(t.Context(), DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := holder(lease); got != leader.e.Identity() {
		t.Fatalf("the Lease's holder is %q, want the leader %q", got, leader.e.Identity())
	}

	leader.cancel()
	if err := <-leader.done; err != nil {
		t.Fatalf("the leader's Run: %v", err)
	}
	leader.done <- nil
	stopped := time.Now()
	testwait.For(t, "the standby to take over", standby.e.Leading)
	t.Logf("the standby led %v after the leader stopped (retry period 250ms)", time.Since(stopped).Round(time.Millisecond))
	lease, err = c.Client.CoordinationV1().Leases("meshfed").Get(t.Context(), DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder(lease) != standby.e.Identity() || *lease.Spec.LeaseTransitions != 1 {
		t.Errorf("Lease %+v; want %s holding it after one transition", lease.Spec, standby.e.Identity())
	}
}
