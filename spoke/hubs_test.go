package spoke

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeLink counts its runs; it runs until its context ends.
type fakeLink struct {
	addr, serverName string
	closed           chan struct{}
}

func (l *fakeLink) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (l *fakeLink) Close()                        { close(l.closed) }

// fakeDNS answers the hub set's lookups from a table the test changes.
type fakeDNS struct {
	mu      sync.Mutex
	answers map[string][]string
	fail    bool
	failed  int
}

func (d *fakeDNS) lookup(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail {
		d.failed++
		return nil, errors.New("no such host")
	}
	return d.answers[host], nil
}

func (d *fakeDNS) set(host string, addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers[host] = addrs
}

func TestHubSetFollowsReplicas(t *testing.T) {
	targets, err := parseHubs("hub.meshfed.svc:9443, 10.9.9.9:9443")
	if err != nil {
		t.Fatal(err)
	}
	dns := &fakeDNS{answers: map[string][]string{
		// A dual-stack headless Service: each replica once, by IPv4.
		"hub.meshfed.svc": {"10.0.0.2", "fd00::2", "10.0.0.1", "fd00::1"},
	}}
	var mu sync.Mutex
	links := map[string]*fakeLink{}
	h := &hubSet{
		targets: targets, interval: 5 * time.Millisecond, lookup: dns.lookup, log: slog.New(slog.DiscardHandler),
		open: func(addr, serverName string) (hubLink, error) {
			mu.Lock()
			defer mu.Unlock()
			l := &fakeLink{addr: addr, serverName: serverName, closed: make(chan struct{})}
			links[addr] = l
			return l, nil
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()

	waitAddrs := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Equal(h.Addrs(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("streams to %v, want %v", h.Addrs(), want)
			}
			<-time.After(time.Millisecond)
		}
	}
	waitAddrs("10.0.0.1:9443", "10.0.0.2:9443", "10.9.9.9:9443")
	mu.Lock()
	if sn := links["10.0.0.1:9443"].serverName; sn != "hub.meshfed.svc" {
		t.Errorf("a replica found by name verifies %q, want the name", sn)
	}
	if sn := links["10.9.9.9:9443"].serverName; sn != "10.9.9.9" {
		t.Errorf("a replica given by address verifies %q, want the address", sn)
	}
	gone := links["10.0.0.1:9443"]
	mu.Unlock()

	dns.set("hub.meshfed.svc", "10.0.0.2", "10.0.0.3") // one replica replaced
	waitAddrs("10.0.0.2:9443", "10.0.0.3:9443", "10.9.9.9:9443")
	<-gone.closed

	dns.mu.Lock()
	dns.fail = true // a DNS outage keeps the replicas the spoke has
	dns.mu.Unlock()
	dns.set("hub.meshfed.svc")
	for deadline := time.Now().Add(10 * time.Second); ; <-time.After(time.Millisecond) {
		dns.mu.Lock()
		failed := dns.failed
		dns.mu.Unlock()
		if failed >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d failed lookups, want the names resolved again", failed)
		}
	}
	waitAddrs("10.0.0.2:9443", "10.0.0.3:9443", "10.9.9.9:9443")

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := h.Addrs(); len(got) != 0 {
		t.Errorf("streams to %v after Run returned", got)
	}
	mu.Lock()
	defer mu.Unlock()
	for addr, l := range links {
		select {
		case <-l.closed:
		default:
			t.Errorf("the link to %s was not closed", addr)
		}
	}
}

func TestParseHubs(t *testing.T) {
	for _, bad := range []string{"", ",", "hub", "hub:", ":9443", "a:1,b"} {
		if _, err := parseHubs(bad); err == nil {
			t.Errorf("parseHubs(%q) accepted", bad)
		}
	}
	got, err := parseHubs("a:1,[fd00::1]:2")
	if err != nil || !slices.Equal(got, []hubTarget{{"a", "1"}, {"fd00::1", "2"}}) {
		t.Errorf("parseHubs = %v, %v", got, err)
	}
}
