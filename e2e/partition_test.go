//go:build (!e2e_memory && !e2e_process && !e2e_istiod) || e2e_process

package e2e

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// partition is a TCP forwarder that can blackhole its connections: while
// cut, it moves no byte in either direction and answers no new
// connection, but closes nothing, as a network partition does. Healed,
// it delivers what waited, as TCP would after retransmitting.
type partition struct {
	lis    net.Listener
	target string

	mu   sync.Mutex
	cut  bool
	heal chan struct{} // closed when the cut heals
	// budget, while armed (> 0), is how many more bytes may go to the
	// target before the partition cuts itself; cutNow is closed then.
	budget int64
	cutNow chan struct{}
}

func startPartition(t *testing.T, target string) *partition {
	t.Helper()
	p := &partition{lis: listenLoopback(t), target: target}
	runInBackground(t, p.serve)
	return p
}

func (p *partition) addr() string { return p.lis.Addr().String() }

// blackhole cuts every connection, open and new.
func (p *partition) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut, p.heal = true, make(chan struct{})
	}
}

// restore heals the cut.
func (p *partition) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.heal)
	}
}

// cutAfter arms the partition to cut itself once n more bytes have gone
// to the target (from any connection): a stream stopped mid-message, or
// mid-way through a series of them. The channel is closed at the cut.
func (p *partition) cutAfter(n int64) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budget, p.cutNow = n, make(chan struct{})
	return p.cutNow
}

// toTarget returns how many of n bytes bound for the target may go
// before the armed cut, and cuts there.
func (p *partition) toTarget(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget <= 0 || p.cut {
		return n
	}
	if int64(n) < p.budget {
		p.budget -= int64(n)
		return n
	}
	allowed := int(p.budget)
	p.budget = 0
	p.cut, p.heal = true, make(chan struct{})
	close(p.cutNow)
	return allowed
}

// wait blocks while the partition is cut; false when ctx ended.
func (p *partition) wait(ctx context.Context) bool {
	p.mu.Lock()
	cut, heal := p.cut, p.heal
	p.mu.Unlock()
	if !cut {
		return true
	}
	select {
	case <-heal:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *partition) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = p.lis.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.forward(ctx, c)
		}()
	}
}

func (p *partition) forward(ctx context.Context, client net.Conn) {
	defer func() { _ = client.Close() }()
	if !p.wait(ctx) {
		return
	}
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		return
	}
	defer func() { _ = server.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		_ = client.Close()
		_ = server.Close()
	})
	defer stop()
	pipe := func(dst, src net.Conn, toTarget bool) {
		defer cancel() // one side closed: close both, as the kernel would
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for b := buf[:n]; len(b) > 0; {
				if !p.wait(ctx) {
					return
				}
				next := len(b)
				if toTarget {
					next = p.toTarget(next)
				}
				if _, werr := dst.Write(b[:next]); werr != nil {
					return
				}
				b = b[next:]
			}
			if err != nil {
				return // EOF or a reset: the cancel closes the other side
			}
		}
	}
	go pipe(server, client, true)
	pipe(client, server, false)
	<-ctx.Done()
}

// TestProcessPartition: a spoke cut off by a partition (no connection
// closed) is detected by the hub's keepalive, demoted after --stale-after,
// and live again when the partition heals, with no response in between
// that lacks its endpoint.
func TestProcessPartition(t *testing.T) {
	h := startProcHub(t, "--stale-after", "1s", "--withdraw-after", "1m",
		"--keepalive-time", "1s", "--keepalive-timeout", "1s", "--xds-warmup", "3s", "--xds-warmup-quiet", "200ms")
	eastPod, westPod := startBackend(t, "127.0.3.1", "east"), startBackend(t, "127.0.3.2", "west")
	cut := startPartition(t, h.federation)
	startProcSpoke(t, cut.addr(), "east", "n1", echoManifests("z-east", eastPod), "--keepalive-time", "1s")
	startProcSpoke(t, h.federation, "west", "n1", echoManifests("z-west", westPod))
	h.waitCluster(t, "east", time.Minute, func(c clusterRow) bool { return c.version > 0 })
	h.waitCluster(t, "west", time.Minute, func(c clusterRow) bool { return c.version > 0 })
	w := watchEDS(t, h.xds)
	live := func(a map[uint32][]string) bool {
		return slices.Equal(a[0], []string{"127.0.3.1"}) && slices.Equal(a[1], []string{"127.0.3.2"})
	}
	w.until("both live", 30*time.Second, live)

	cut.blackhole()
	start := time.Now()
	w.until("east stale", 30*time.Second, func(a map[uint32][]string) bool {
		return slices.Equal(a[0], []string{"127.0.3.2"}) && slices.Equal(a[1], []string{"127.0.3.1"})
	})
	t.Logf("partition → proxy sees east stale after %v (keepalive 1s + 1s, --stale-after 1s)", time.Since(start).Round(time.Millisecond))

	cut.restore()
	start = time.Now()
	var lost []map[uint32][]string
	w.until("east live again", 30*time.Second, func(a map[uint32][]string) bool {
		if !slices.Contains(a[0], "127.0.3.1") && !slices.Contains(a[1], "127.0.3.1") {
			lost = append(lost, a)
		}
		return live(a)
	})
	t.Logf("heal → proxy sees east live after %v", time.Since(start).Round(time.Millisecond))
	if len(lost) > 0 {
		t.Errorf("responses without east's endpoint while it came back: %v", lost)
	}
}
