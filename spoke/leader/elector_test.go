package leader

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/meshfed/meshfed/internal/testwait"
)

// waitLimit bounds every wait of these tests.
const waitLimit = 30 * time.Second

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// memLeases is one Lease in memory, with the API server's optimistic
// concurrency, and a log of the writes in the order they happened.
type memLeases struct {
	mu      sync.Mutex
	lease   *coordinationv1.Lease
	version int
	log     []string
}

func (m *memLeases) Get(_ context.Context, _, name string) (*coordinationv1.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return nil, apierrors.NewNotFound(leasesResource, name)
	}
	return m.lease.DeepCopy(), nil
}

func (m *memLeases) Create(_ context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease != nil {
		return nil, apierrors.NewAlreadyExists(leasesResource, lease.Name)
	}
	return m.store(lease), nil
}

func (m *memLeases) Update(_ context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return nil, apierrors.NewNotFound(leasesResource, lease.Name)
	}
	if lease.ResourceVersion != m.lease.ResourceVersion {
		return nil, apierrors.NewConflict(leasesResource, lease.Name, errors.New("the object has been modified"))
	}
	return m.store(lease), nil
}

func (m *memLeases) store(lease *coordinationv1.Lease) *coordinationv1.Lease {
	m.version++
	m.lease = lease.DeepCopy()
	m.lease.ResourceVersion = strconv.Itoa(m.version)
	m.log = append(m.log, "holder="+ptr.Deref(lease.Spec.HolderIdentity, ""))
	return m.lease.DeepCopy()
}

func (m *memLeases) record(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = append(m.log, s)
}

func (m *memLeases) current() *coordinationv1.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease.DeepCopy()
}

func (m *memLeases) writes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.log...)
}

// partitioned is a client that fails while down is set.
type partitioned struct {
	LeaseClient
	mu   sync.Mutex
	down bool
}

var errPartitioned = errors.New("partitioned")

func (p *partitioned) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

func (p *partitioned) setDown(v bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = v
}

func (p *partitioned) Get(ctx context.Context, ns, name string) (*coordinationv1.Lease, error) {
	if p.isDown() {
		return nil, errPartitioned
	}
	return p.LeaseClient.Get(ctx, ns, name)
}

func (p *partitioned) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if p.isDown() {
		return nil, errPartitioned
	}
	return p.LeaseClient.Update(ctx, lease)
}

// candidate is an elector on a fake clock of its own, running until the
// test ends; its work counts its runs and records when one ends.
type candidate struct {
	t      *testing.T
	e      *Elector
	clk    *clocktesting.FakeClock
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	runs    int
	running bool
	workErr error // what the next run returns once started, when set
}

func testConfig(id string) Config {
	cfg := DefaultConfig()
	cfg.Enabled, cfg.Namespace, cfg.Identity = true, "meshfed", id
	return cfg
}

func startCandidate(t *testing.T, store *memLeases, client LeaseClient, id string, workErr error) *candidate {
	t.Helper()
	e, err := NewElector(testConfig(id), client, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &candidate{t: t, e: e, clk: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)), done: make(chan error, 1), workErr: workErr}
	e.clock = c.clk
	e.jitter = func(d time.Duration) time.Duration { return d }
	ctx, cancel := context.WithCancel(t.Context())
	c.cancel = cancel
	go func() {
		c.done <- e.Run(ctx, func(ctx context.Context) error {
			c.mu.Lock()
			c.runs++
			c.running = true
			err := c.workErr
			c.mu.Unlock()
			if err != nil {
				return err
			}
			<-ctx.Done()
			c.mu.Lock()
			c.running = false
			c.mu.Unlock()
			store.record(id + " work ended")
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-c.done; err != nil && workErr == nil {
			t.Errorf("elector %s: %v", id, err)
		}
	})
	return c
}

func (c *candidate) state() (runs int, running bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs, c.running
}

// settle waits until the elector waits on its clock: it has finished
// what the last step of its clock started.
func (c *candidate) settle() {
	c.t.Helper()
	testwait.For(c.t, "the elector to wait on its clock", c.clk.HasWaiters)
}

// step moves the candidate's clock on by d, and settles.
func (c *candidate) step(d time.Duration) {
	c.t.Helper()
	c.settle()
	c.clk.Step(d)
	c.settle()
}

func holder(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }

func TestElectorTakesAFreeLease(t *testing.T) {
	store := &memLeases{}
	a := startCandidate(t, store, store, "a", nil)
	testwait.For(t, "a to lead", a.e.Leading)
	a.settle()
	l := store.current()
	if holder(l) != "a" || ptr.Deref(l.Spec.LeaseTransitions, -1) != 0 || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 15 {
		t.Errorf("lease spec %+v; want a holding it for 15 s, no transitions", l.Spec)
	}
	// The work runs in a goroutine of its own, started as a leads.
	testwait.For(t, "a's work to run", func() bool { runs, running := a.state(); return runs == 1 && running })
	// Renewals keep the acquire time and move the renew time.
	acquired := l.Spec.AcquireTime.Time
	a.step(DefaultRetryPeriod)
	l = store.current()
	if !l.Spec.AcquireTime.Time.Equal(acquired) || !l.Spec.RenewTime.Time.Equal(acquired.Add(DefaultRetryPeriod)) {
		t.Errorf("after a renewal: acquired %v, renewed %v; want %v and %v", l.Spec.AcquireTime, l.Spec.RenewTime, acquired, acquired.Add(DefaultRetryPeriod))
	}
}

// TestStandbyTakesOverASilentLeader: a leader cut off from the API server
// stops leading at its renew deadline, before a standby may take over at
// the lease's expiry as timed from when the standby last saw it change.
func TestStandbyTakesOverASilentLeader(t *testing.T) {
	store := &memLeases{}
	aClient := &partitioned{LeaseClient: store}
	a := startCandidate(t, store, aClient, "a", nil)
	testwait.For(t, "a to lead", a.e.Leading)
	b := startCandidate(t, store, store, "b", nil)
	b.settle()
	if b.e.Leading() {
		t.Fatal("b leads while a holds the lease")
	}

	aClient.setDown(true)
	// a tries every RetryPeriod; it leads until its renew deadline.
	for range DefaultRenewDeadline/DefaultRetryPeriod - 1 {
		a.step(DefaultRetryPeriod)
		if !a.e.Leading() {
			t.Fatalf("a stopped leading before its renew deadline")
		}
	}
	a.step(DefaultRetryPeriod)
	testwait.For(t, "a's work to end", func() bool { _, running := a.state(); return !running })
	if a.e.Leading() {
		t.Fatal("a leads past its renew deadline")
	}

	// b saw the lease last change at its start: it waits the lease's
	// duration from there.
	for range DefaultLeaseDuration / DefaultRetryPeriod {
		b.step(DefaultRetryPeriod)
		if b.e.Leading() {
			t.Fatalf("b took over before the lease expired")
		}
	}
	b.step(DefaultRetryPeriod)
	testwait.For(t, "b to lead", b.e.Leading)
	l := store.current()
	if holder(l) != "b" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 1 {
		t.Errorf("lease %+v; want b holding it after one transition", l.Spec)
	}

	// a, back, sees b hold the lease and stands by.
	aClient.setDown(false)
	a.step(2 * DefaultRetryPeriod)
	if a.e.Leading() {
		t.Error("a leads again while b holds the lease")
	}
	if runs, _ := a.state(); runs != 1 {
		t.Errorf("a's work ran %d times, want once", runs)
	}
}

// TestReleaseOnShutdown: a leader that stops releases the lease once its
// work has ended, and a standby takes it at its next try.
func TestReleaseOnShutdown(t *testing.T) {
	store := &memLeases{}
	a := startCandidate(t, store, store, "a", nil)
	testwait.For(t, "a to lead", a.e.Leading)
	b := startCandidate(t, store, store, "b", nil)
	b.settle()

	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("a's Run: %v", err)
	}
	a.done <- nil // for the cleanup
	writes := store.writes()
	if n := len(writes); n < 2 || writes[n-2] != "a work ended" || writes[n-1] != "holder=" {
		t.Fatalf("writes %q; want a's work to end, then the lease released", writes)
	}
	b.step(DefaultRetryPeriod)
	testwait.For(t, "b to lead", b.e.Leading)
}

// TestLeaderStopsWhenAnotherHolds: a leader that reads another holder in
// the lease stops at once, without waiting for its renew deadline.
func TestLeaderStopsWhenAnotherHolds(t *testing.T) {
	store := &memLeases{}
	a := startCandidate(t, store, store, "a", nil)
	testwait.For(t, "a to lead", a.e.Leading)
	a.settle()
	l := store.current()
	l.Spec.HolderIdentity = ptr.To("intruder")
	if _, err := store.Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	a.step(DefaultRetryPeriod)
	if a.e.Leading() {
		t.Fatal("a leads while another holds the lease")
	}
	testwait.For(t, "a's work to end", func() bool { _, running := a.state(); return !running })
	if holder(store.current()) != "intruder" {
		t.Errorf("a released or took the lease it lost")
	}
}

// TestWorkErrorEndsRun: the leader's work failing ends Run with its error,
// and the lease is released.
func TestWorkErrorEndsRun(t *testing.T) {
	store := &memLeases{}
	boom := errors.New("boom")
	a := startCandidate(t, store, store, "a", boom)
	var err error
	select {
	case err = <-a.done:
		a.done <- nil
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
	}
	if !errors.Is(err, boom) {
		t.Errorf("Run() = %v, want %v", err, boom)
	}
	if holder(store.current()) != "" {
		t.Errorf("the lease is still held by %q", holder(store.current()))
	}
}

func TestWait(t *testing.T) {
	e, err := NewElector(testConfig("a"), &memLeases{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := e.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on an ended context of a standby = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Wait(t.Context()) }()
	e.setLeading(true)
	if err := <-done; err != nil {
		t.Errorf("Wait() = %v once leading", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"off, any names", func(c *Config) { c.Enabled, c.LeaseName = false, "Not A Name" }, ""},
		{"bad lease name", func(c *Config) { c.LeaseName = "Not A Name" }, "--leader-elect-lease-name"},
		{"bad namespace", func(c *Config) { c.Namespace = "a.b" }, "--leader-elect-namespace"},
		{"renew deadline not below the lease", func(c *Config) { c.RenewDeadline = c.LeaseDuration }, "must be longer than --leader-elect-renew-deadline"},
		{"retry period too long", func(c *Config) { c.RetryPeriod = c.RenewDeadline }, "1.2 × --leader-elect-retry-period"},
		{"zero", func(c *Config) { c.RetryPeriod = 0 }, "must be positive"},
		{"fractional lease", func(c *Config) { c.LeaseDuration = 15500 * time.Millisecond }, "whole number of seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("a")
			tc.edit(&cfg)
			err := cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
	if _, err := NewElector(DefaultConfig(), &memLeases{}, nil); err == nil {
		t.Error("NewElector without a namespace succeeded")
	}
}
