package bench

import (
	"slices"
	"sync"
	"time"
)

// change is one endpoint change: a pod of a service replaced by a new pod
// at a new address. Clients recognize it by that address, so latency is
// measured per (change, client) pair, not estimated.
type change struct {
	id       int
	service  int
	address  string
	observed time.Time // when the spoke applied it to its shard
	want     int       // clients that must see it

	mu       sync.Mutex
	received map[int32]time.Duration // by client index
}

// changes is the set of changes made in a run.
type changes struct {
	inflight sync.Map // address → *change, until every client has seen it

	mu  sync.Mutex
	all []*change
}

// add registers a change before it is applied, so that no client can see
// its address first.
func (cs *changes) add(c *change) {
	c.received = make(map[int32]time.Duration, c.want)
	cs.mu.Lock()
	cs.all = append(cs.all, c)
	cs.mu.Unlock()
	if c.want > 0 {
		cs.inflight.Store(c.address, c)
	}
}

// seen records that client saw address at now, if it is a change's.
func (cs *changes) seen(address string, client int32, now time.Time) {
	v, ok := cs.inflight.Load(address)
	if !ok {
		return
	}
	c := v.(*change)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.received[client]; ok || c.observed.IsZero() {
		return
	}
	c.received[client] = now.Sub(c.observed)
	if len(c.received) >= c.want {
		cs.inflight.Delete(address)
	}
}

// pending counts the changes some client has not seen yet.
func (cs *changes) pending() int {
	n := 0
	cs.inflight.Range(func(any, any) bool { n++; return true })
	return n
}

// latencyStats summarizes the latencies of (change, client) pairs.
type latencyStats struct {
	Pairs              int           `json:"pairs"`
	P50, P90, P99, Max time.Duration `json:"-"`
	Millis             percentiles   `json:"ms"`
}

type percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// latencies returns the stats of the pairs of each group (a client is in
// the groups groupsOf returns); pairs never seen count as missed in each.
func (cs *changes) latencies(groupsOf func(client int32) []string) map[string]latencyStats {
	cs.mu.Lock()
	list := slices.Clone(cs.all)
	cs.mu.Unlock()
	samples := map[string][]time.Duration{}
	for _, c := range list {
		c.mu.Lock()
		for client, d := range c.received {
			for _, g := range groupsOf(client) {
				samples[g] = append(samples[g], d)
			}
		}
		c.mu.Unlock()
	}
	out := map[string]latencyStats{}
	for g, s := range samples {
		out[g] = summarize(s)
	}
	return out
}

// missed counts the (change, client) pairs never seen.
func (cs *changes) missed() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for _, c := range cs.all {
		c.mu.Lock()
		n += c.want - len(c.received)
		c.mu.Unlock()
	}
	return n
}

func summarize(s []time.Duration) latencyStats {
	st := latencyStats{Pairs: len(s)}
	if len(s) == 0 {
		return st
	}
	slices.Sort(s)
	q := func(p int) time.Duration { return s[(len(s)*p+99)/100-1] }
	st.P50, st.P90, st.P99, st.Max = q(50), q(90), q(99), s[len(s)-1]
	st.Millis = percentiles{P50: ms(st.P50), P90: ms(st.P90), P99: ms(st.P99), Max: ms(st.Max)}
	return st
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
