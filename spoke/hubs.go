package spoke

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// hubTarget is one entry of --hub: a host (a name or an address) and a
// port.
type hubTarget struct{ host, port string }

// parseHubs parses --hub: host:port entries separated by commas.
func parseHubs(s string) ([]hubTarget, error) {
	var out []hubTarget
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		host, port, err := net.SplitHostPort(entry)
		if err != nil {
			return nil, fmt.Errorf("--hub %q: %w", entry, err)
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("--hub %q: want host:port", entry)
		}
		out = append(out, hubTarget{host, port})
	}
	if len(out) == 0 {
		return nil, errors.New("--hub names no host:port")
	}
	return out, nil
}

// hubLink is the spoke's connection to one hub replica.
type hubLink interface {
	// Run streams the shard to the replica until ctx ends.
	Run(ctx context.Context) error
	// Close releases what the link holds once Run has returned.
	Close()
}

// hubSet keeps one link per hub replica: every address of every --hub
// entry, resolved again every interval, so that replicas that appear are
// dialled and those that vanish are let go. A name that fails to resolve
// keeps the addresses it had: a DNS outage must not cut the spoke off.
type hubSet struct {
	targets  []hubTarget
	interval time.Duration
	lookup   func(ctx context.Context, host string) ([]string, error)
	// open returns the link to the replica at addr, whose certificate
	// names serverName.
	open func(addr, serverName string) (hubLink, error)
	log  *slog.Logger

	mu    sync.Mutex
	known map[hubTarget][]string // each entry's last resolved addresses
	links map[string]*runningLink
}

type runningLink struct {
	link   hubLink
	cancel context.CancelFunc
	done   chan struct{}
}

// Addrs returns the addresses of the replicas the spoke streams to.
func (h *hubSet) Addrs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.links))
}

// Run follows the replicas until ctx ends; it returns nil then, with
// every link stopped.
func (h *hubSet) Run(ctx context.Context) error {
	defer h.stopAll()
	h.mu.Lock()
	h.known, h.links = map[hubTarget][]string{}, map[string]*runningLink{}
	h.mu.Unlock()
	var tick <-chan time.Time
	if h.interval > 0 && h.hasNames() {
		t := time.NewTicker(h.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		h.reconcile(ctx, h.resolve(ctx))
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}

func (h *hubSet) hasNames() bool {
	for _, t := range h.targets {
		if _, err := netip.ParseAddr(t.host); err != nil {
			return true
		}
	}
	return false
}

// resolve returns the replicas' addresses, each with the name its
// certificate must carry.
func (h *hubSet) resolve(ctx context.Context) map[string]string {
	out := map[string]string{}
	for _, t := range h.targets {
		addrs, err := h.addrsOf(ctx, t)
		h.mu.Lock()
		switch {
		case err != nil && len(h.known[t]) > 0:
			h.log.Warn("hub name did not resolve; keeping its last addresses", "hub", t.host, "err", err, "addresses", h.known[t])
		case err != nil:
			h.log.Error("hub name did not resolve; retrying", "hub", t.host, "err", err, "retry_in", h.interval)
		default:
			if !slices.Equal(addrs, h.known[t]) {
				h.log.Info("hub replicas", "hub", net.JoinHostPort(t.host, t.port), "addresses", addrs)
			}
			h.known[t] = addrs
		}
		for _, a := range h.known[t] {
			out[a] = t.host
		}
		h.mu.Unlock()
	}
	return out
}

// addrsOf resolves one entry. A name with addresses of both families
// (a dual-stack headless Service) is taken by its IPv4 addresses only:
// the two addresses of one replica must not become two streams to it.
func (h *hubSet) addrsOf(ctx context.Context, t hubTarget) ([]string, error) {
	if _, err := netip.ParseAddr(t.host); err == nil {
		return []string{net.JoinHostPort(t.host, t.port)}, nil
	}
	hosts, err := h.lookup(ctx, t.host)
	if err != nil {
		return nil, err
	}
	var v4, v6 []string
	for _, s := range hosts {
		ip, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			continue
		case ip.Unmap().Is4():
			v4 = append(v4, net.JoinHostPort(ip.Unmap().String(), t.port))
		default:
			v6 = append(v6, net.JoinHostPort(ip.String(), t.port))
		}
	}
	addrs := v4
	if len(addrs) == 0 {
		addrs = v6
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s has no addresses", t.host)
	}
	slices.Sort(addrs)
	return slices.Compact(addrs), nil
}

// reconcile starts a link to each new address and stops those to
// addresses gone.
func (h *hubSet) reconcile(ctx context.Context, want map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for addr, l := range h.links {
		if _, ok := want[addr]; !ok {
			h.log.Info("hub replica gone; closing its stream", "hub", addr)
			l.stop()
			delete(h.links, addr)
		}
	}
	for _, addr := range slices.Sorted(maps.Keys(want)) {
		if _, ok := h.links[addr]; ok || ctx.Err() != nil {
			continue
		}
		link, err := h.open(addr, want[addr])
		if err != nil {
			h.log.Error("cannot dial hub replica", "hub", addr, "err", err)
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		l := &runningLink{link: link, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(l.done)
			if err := link.Run(lctx); err != nil {
				h.log.Error("hub stream stopped", "hub", addr, "err", err)
			}
		}()
		h.links[addr] = l
	}
}

func (l *runningLink) stop() {
	l.cancel()
	<-l.done
	l.link.Close()
}

func (h *hubSet) stopAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for addr, l := range h.links {
		l.stop()
		delete(h.links, addr)
	}
}
