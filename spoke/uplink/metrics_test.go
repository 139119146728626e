package uplink

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/spoke/shard"
)

// TestUplinkMetrics: a full state acknowledged, a delta rejected, a
// reconnect that resumes; the metrics say so.
func TestUplinkMetrics(t *testing.T) {
	ut := start(t, 0)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(ut.metrics)

	s := ut.dial.next(t)
	welcome(t, s, false)
	m := s.expect(t)
	full := m.GetUpdate()
	fullBytes := proto.Size(m)
	s.answer(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Ack{Ack: &federationpb.Ack{Version: full.GetVersion(), Nonce: full.GetNonce()}}})
	<-ut.fulls
	ut.clock.Step(time.Minute) // the ack was at 1000 s; the rest happens later
	ut.t.Update(time.Now(), true, func(w shard.Writer) { w.DeleteService("demo/echo") })
	m = s.expect(t)
	delta := m.GetUpdate()
	deltaBytes := proto.Size(m)
	s.answer(&federationpb.HubMessage{Kind: &federationpb.HubMessage_Nack{Nack: &federationpb.Nack{
		Version: delta.GetVersion(), Nonce: delta.GetNonce(), Code: federationpb.NackCode_NACK_CODE_INVALID, Reason: "bad",
	}}})
	ut.eventually(t, "the nack", func(st Status) bool { return st.Nacks == 1 })
	if d := <-ut.clock.waits; d != nackBackoff {
		t.Fatalf("wait %v after the nack, want the session's nack backoff", d)
	}
	s.close()
	ut.clock.reconnect(t)
	welcome(t, ut.dial.next(t), true)
	ut.eventually(t, "resumed", func(st Status) bool { return st.Connected && st.Resumed })

	want := `
# HELP meshfed_spoke_uplink_acked_version The version of the shard the hub last acknowledged.
# TYPE meshfed_spoke_uplink_acked_version gauge
meshfed_spoke_uplink_acked_version{hub="hub-a"} 1
# HELP meshfed_spoke_uplink_acks_total Updates the hub acknowledged.
# TYPE meshfed_spoke_uplink_acks_total counter
meshfed_spoke_uplink_acks_total{hub="hub-a"} 1
# HELP meshfed_spoke_uplink_connected 1 while the hub has welcomed the spoke's current stream, 0 otherwise.
# TYPE meshfed_spoke_uplink_connected gauge
meshfed_spoke_uplink_connected{hub="hub-a"} 1
# HELP meshfed_spoke_uplink_last_ack_timestamp_seconds When the hub last acknowledged an update (absent until it has).
# TYPE meshfed_spoke_uplink_last_ack_timestamp_seconds gauge
meshfed_spoke_uplink_last_ack_timestamp_seconds{hub="hub-a"} 1000
# HELP meshfed_spoke_uplink_last_full_state_chunks Chunks of the last full state sent.
# TYPE meshfed_spoke_uplink_last_full_state_chunks gauge
meshfed_spoke_uplink_last_full_state_chunks{hub="hub-a"} 1
# HELP meshfed_spoke_uplink_nacks_total Updates the hub rejected (it keeps its last good shard; the spoke's log has the reason).
# TYPE meshfed_spoke_uplink_nacks_total counter
meshfed_spoke_uplink_nacks_total{hub="hub-a"} 1
# HELP meshfed_spoke_uplink_reconnects_total New streams opened after one ended or failed to open.
# TYPE meshfed_spoke_uplink_reconnects_total counter
meshfed_spoke_uplink_reconnects_total{hub="hub-a"} 1
# HELP meshfed_spoke_uplink_resumed 1 when the hub resumed the session of the last stream it welcomed, 0 when it asked for the full state.
# TYPE meshfed_spoke_uplink_resumed gauge
meshfed_spoke_uplink_resumed{hub="hub-a"} 1
# HELP meshfed_spoke_uplink_sessions_total Streams the hub welcomed, by whether it resumed the spoke's session.
# TYPE meshfed_spoke_uplink_sessions_total counter
meshfed_spoke_uplink_sessions_total{hub="hub-a",resumed="false"} 1
meshfed_spoke_uplink_sessions_total{hub="hub-a",resumed="true"} 1
`
	names := []string{
		"meshfed_spoke_uplink_acked_version", "meshfed_spoke_uplink_acks_total", "meshfed_spoke_uplink_connected",
		"meshfed_spoke_uplink_last_ack_timestamp_seconds", "meshfed_spoke_uplink_last_full_state_chunks",
		"meshfed_spoke_uplink_nacks_total", "meshfed_spoke_uplink_reconnects_total", "meshfed_spoke_uplink_resumed",
		"meshfed_spoke_uplink_sessions_total",
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// The sizes depend on the encoding: compare them with what the hub got.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "meshfed_spoke_uplink_update_bytes":
				var kind string
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" {
						kind = l.GetValue()
					}
				}
				got["update_bytes_count_"+kind] = float64(m.GetHistogram().GetSampleCount())
				got["update_bytes_sum_"+kind] = m.GetHistogram().GetSampleSum()
			case "meshfed_spoke_uplink_sent_bytes_total":
				got["sent"] = m.GetCounter().GetValue()
			case "meshfed_spoke_uplink_last_full_state_bytes":
				got["last_full"] = m.GetGauge().GetValue()
			}
		}
	}
	wantSizes := map[string]float64{
		"update_bytes_count_full": 1, "update_bytes_sum_full": float64(fullBytes),
		"update_bytes_count_delta": 1, "update_bytes_sum_delta": float64(deltaBytes),
		"sent": float64(fullBytes + deltaBytes), "last_full": float64(fullBytes),
	}
	for k, v := range wantSizes {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	problems, err := testutil.CollectAndLint(ut.metrics)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}
