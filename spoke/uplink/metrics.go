package uplink

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics exports the [Status] of a spoke's uplinks, one per hub replica,
// as metrics read at each scrape, and the sizes of the updates they sent;
// every series has the label hub, the replica's address:
//
//	meshfed_spoke_uplink_connected                    1 while the hub has welcomed the current stream
//	meshfed_spoke_uplink_resumed                      1 when the hub resumed the last welcomed stream's session
//	meshfed_spoke_uplink_sessions_total{resumed}      streams the hub welcomed, resumed or not
//	meshfed_spoke_uplink_reconnects_total             new streams after one ended or failed
//	meshfed_spoke_uplink_acks_total                   updates the hub acknowledged
//	meshfed_spoke_uplink_nacks_total                  updates the hub rejected
//	meshfed_spoke_uplink_last_ack_timestamp_seconds   when the hub last acknowledged an update
//	meshfed_spoke_uplink_acked_version                the version it acknowledged
//	meshfed_spoke_uplink_sent_bytes_total             encoded bytes of the updates sent
//	meshfed_spoke_uplink_update_bytes{kind}           histogram of each update's bytes, kind full or delta
//	meshfed_spoke_uplink_last_full_state_bytes        the last full state's bytes
//	meshfed_spoke_uplink_last_full_state_chunks       and its chunks
//
// An uplink joins when it is made with [Config.Metrics] and leaves with
// [Metrics.Remove], when its replica is gone.
type Metrics struct {
	updateBytes *prometheus.HistogramVec

	mu      sync.Mutex
	uplinks map[*Uplink]struct{}
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns metrics with no uplinks yet.
func NewMetrics() *Metrics {
	return &Metrics{updateBytes: newUpdateBytes(), uplinks: map[*Uplink]struct{}{}}
}

func (m *Metrics) add(u *Uplink) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uplinks[u] = struct{}{}
}

// Remove drops u's series.
func (m *Metrics) Remove(u *Uplink) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.uplinks, u)
	m.updateBytes.DeletePartialMatch(prometheus.Labels{"hub": u.cfg.Hub})
}

var (
	hubLabel      = []string{"hub"}
	connectedDesc = prometheus.NewDesc("meshfed_spoke_uplink_connected",
		"1 while the hub has welcomed the spoke's current stream, 0 otherwise.", hubLabel, nil)
	resumedDesc = prometheus.NewDesc("meshfed_spoke_uplink_resumed",
		"1 when the hub resumed the session of the last stream it welcomed, 0 when it asked for the full state.", hubLabel, nil)
	sessionsDesc = prometheus.NewDesc("meshfed_spoke_uplink_sessions_total",
		"Streams the hub welcomed, by whether it resumed the spoke's session.", []string{"hub", "resumed"}, nil)
	reconnectsDesc = prometheus.NewDesc("meshfed_spoke_uplink_reconnects_total",
		"New streams opened after one ended or failed to open.", hubLabel, nil)
	acksDesc = prometheus.NewDesc("meshfed_spoke_uplink_acks_total",
		"Updates the hub acknowledged.", hubLabel, nil)
	nacksDesc = prometheus.NewDesc("meshfed_spoke_uplink_nacks_total",
		"Updates the hub rejected (it keeps its last good shard; the spoke's log has the reason).", hubLabel, nil)
	lastAckDesc = prometheus.NewDesc("meshfed_spoke_uplink_last_ack_timestamp_seconds",
		"When the hub last acknowledged an update (absent until it has).", hubLabel, nil)
	ackedVersionDesc = prometheus.NewDesc("meshfed_spoke_uplink_acked_version",
		"The version of the shard the hub last acknowledged.", hubLabel, nil)
	sentBytesDesc = prometheus.NewDesc("meshfed_spoke_uplink_sent_bytes_total",
		"Encoded bytes of the shard updates sent, every chunk counted.", hubLabel, nil)
	lastFullBytesDesc = prometheus.NewDesc("meshfed_spoke_uplink_last_full_state_bytes",
		"Encoded bytes of the last full state sent.", hubLabel, nil)
	lastFullChunksDesc = prometheus.NewDesc("meshfed_spoke_uplink_last_full_state_chunks",
		"Chunks of the last full state sent.", hubLabel, nil)
)

// newUpdateBytes returns the histogram of update sizes. Its buckets go
// from a lone endpoint's delta (hundreds of bytes) to a large cluster's
// full state (tens of megabytes).
func newUpdateBytes() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "meshfed_spoke_uplink_update_bytes",
		Help:    "Encoded bytes of each shard update sent, every chunk counted, by kind (full or delta).",
		Buckets: prometheus.ExponentialBuckets(256, 4, 10),
	}, []string{"hub", "kind"})
}

func updateKind(full bool) string {
	if full {
		return "full"
	}
	return "delta"
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		connectedDesc, resumedDesc, sessionsDesc, reconnectsDesc, acksDesc, nacksDesc,
		lastAckDesc, ackedVersionDesc, sentBytesDesc, lastFullBytesDesc, lastFullChunksDesc,
	} {
		ch <- d
	}
	m.updateBytes.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	uplinks := make([]*Uplink, 0, len(m.uplinks))
	for u := range m.uplinks {
		uplinks = append(uplinks, u)
	}
	m.mu.Unlock()
	for _, u := range uplinks {
		collect(ch, u.cfg.Hub, u.Status())
	}
	m.updateBytes.Collect(ch)
}

func collect(ch chan<- prometheus.Metric, hub string, st Status) {
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, hub)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{hub}, labels...)...)
	}
	gauge(connectedDesc, bit(st.Connected))
	gauge(resumedDesc, bit(st.Resumed))
	counter(sessionsDesc, float64(st.Resumes), "true")
	counter(sessionsDesc, float64(st.Sessions-st.Resumes), "false")
	counter(reconnectsDesc, float64(st.Reconnects))
	counter(acksDesc, float64(st.Acks))
	counter(nacksDesc, float64(st.Nacks))
	if !st.LastAck.IsZero() {
		gauge(lastAckDesc, float64(st.LastAck.UnixNano())/1e9)
	}
	gauge(ackedVersionDesc, float64(st.AckedVersion))
	counter(sentBytesDesc, float64(st.BytesSent))
	gauge(lastFullBytesDesc, float64(st.LastFullBytes))
	gauge(lastFullChunksDesc, float64(st.LastFullChunks))
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
