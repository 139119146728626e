package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the report: one column per server and, when both ran,
// baseline ÷ meshfed (above 1: meshfed is better by that factor).
func (r *Report) WriteTable(out io.Writer) error {
	c := r.Config
	fmt.Fprintf(out, "\n%d clusters × %d services × %d endpoints (%d endpoints, %d services exported by %d clusters each); "+
		"clients %d gRPC, %d Envoy, %d ztunnel (%d services each); %.0f changes/s for %s\n\n",
		c.Clusters, c.ServicesPerCluster, c.EndpointsPerCluster/c.ServicesPerCluster, c.Endpoints, c.Services, c.Replicas,
		c.Clients.GRPC, c.Clients.Envoy, c.Clients.Ztunnel, c.Subscriptions, c.Rate, c.Duration)
	var meshfed, baseline *Result
	for i := range r.Results {
		switch r.Results[i].Server {
		case ServerMeshfed:
			meshfed = &r.Results[i]
		case ServerBaseline:
			baseline = &r.Results[i]
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	header := []string{"figure"}
	for _, res := range r.Results {
		header = append(header, res.Server)
	}
	ratio := meshfed != nil && baseline != nil
	if ratio {
		header = append(header, "baseline ÷ meshfed")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	count := func(name string, get func(*Result) int) {
		cells := []string{name}
		for i := range r.Results {
			cells = append(cells, fmt.Sprint(get(&r.Results[i])))
		}
		if ratio {
			cells = append(cells, "")
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row := func(name, unit string, get func(*Result) float64, lowerIsBetter bool) {
		cells := []string{name}
		for i := range r.Results {
			cells = append(cells, format(get(&r.Results[i]), unit))
		}
		if ratio {
			m, b := get(meshfed), get(baseline)
			switch {
			case m == 0 || b == 0:
				cells = append(cells, "–")
			case lowerIsBetter:
				cells = append(cells, fmt.Sprintf("%.1f×", b/m))
			default:
				cells = append(cells, fmt.Sprintf("%.1f×", m/b))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	count("changes", func(r *Result) int { return r.Changes })
	count("(change, client) pairs seen", func(r *Result) int { return r.Latency[groupAll].Pairs })
	count("pairs never seen", func(r *Result) int { return r.Missed })
	x := func(get func(latencyStats) float64) func(*Result) float64 {
		return func(r *Result) float64 { return get(r.Latency[groupXDS]) }
	}
	row("propagation p50, gRPC + Envoy", "ms", x(func(l latencyStats) float64 { return l.Millis.P50 }), true)
	row("propagation p90, gRPC + Envoy", "ms", x(func(l latencyStats) float64 { return l.Millis.P90 }), true)
	row("propagation p99, gRPC + Envoy", "ms", x(func(l latencyStats) float64 { return l.Millis.P99 }), true)
	row("propagation max, gRPC + Envoy", "ms", x(func(l latencyStats) float64 { return l.Millis.Max }), true)
	for _, k := range []string{kindGRPC, kindEnvoy, kindZtunnel} {
		if slices.ContainsFunc(r.Results, func(r Result) bool { return r.Latency[k].Pairs > 0 }) {
			row("  p99, "+k+" clients", "ms", func(r *Result) float64 { return r.Latency[k].Millis.P99 }, true)
		}
	}
	if slices.ContainsFunc(r.Results, func(r Result) bool { return r.Latency[kindZtunnel].Pairs > 0 }) {
		row("  p50, ztunnel clients", "ms", func(r *Result) float64 { return r.Latency[kindZtunnel].Millis.P50 }, true)
	}
	if slices.ContainsFunc(r.Results, func(r Result) bool { return r.HubPairs > 0 }) {
		row("  p50, as the hub measures it (to ACK)", "ms", func(r *Result) float64 { return r.HubPropagation.P50 }, true)
		row("  p99, as the hub measures it (to ACK)", "ms", func(r *Result) float64 { return r.HubPropagation.P99 }, true)
	}
	row("hub CPU per change", "ms", func(r *Result) float64 { return r.CPUPerChangeMillis }, true)
	row("resources encoded per change", "", func(r *Result) float64 { return r.EncodesPerChange }, true)
	row("spoke → hub per change", "B", func(r *Result) float64 { return r.SpokeBytesPerChange }, true)
	row("hub → clients per change", "B", func(r *Result) float64 { return r.ClientBytesPerChange }, true)
	row("hub heap, spokes synced", "MiB", func(r *Result) float64 { return r.HeapSyncedBytes / mib }, true)
	row("  of it, objects (the rest: free space in their spans)", "MiB", func(r *Result) float64 { return r.HeapSyncedLiveBytes / mib }, true)
	row("hub heap per endpoint (+ workload)", "B", func(r *Result) float64 { return r.HeapPerEndpoint }, true)
	row("hub heap, first half of gRPC + Envoy clients (their views built)", "MiB", func(r *Result) float64 { return r.HeapFirstClients / mib }, true)
	row("hub heap per gRPC or Envoy client, second half", "B", func(r *Result) float64 { return r.HeapPerClient }, true)
	row("hub heap, first half of ztunnels", "MiB", func(r *Result) float64 { return r.HeapFirstZtunnels / mib }, true)
	row("hub heap per ztunnel, second half", "B", func(r *Result) float64 { return r.HeapPerZtunnel }, true)
	row("hub RSS, spokes synced", "MiB", func(r *Result) float64 { return r.RSSSyncedBytes / mib }, true)
	row("hub RSS per endpoint (+ workload), spokes synced", "B", func(r *Result) float64 { return r.RSSPerEndpoint }, true)
	row("hub RSS, all connected, after the churn", "MiB", func(r *Result) float64 { return r.RSSBytes / mib }, true)
	row("spokes' initial sync", "s", func(r *Result) float64 { return r.SpokeSyncSeconds }, true)
	row("clients' initial sync", "s", func(r *Result) float64 { return r.ClientSyncSeconds }, true)
	row("converged after hub restart", "s", func(r *Result) float64 { return r.RestartSeconds }, true)
	row("partial EDS responses after the restart", "", func(r *Result) float64 { return float64(r.RestartPartial) }, true)
	return tw.Flush()
}

func format(v float64, unit string) string {
	var s string
	switch {
	case v == 0:
		s = "0"
	case v >= 100:
		s = fmt.Sprintf("%.0f", v)
	case v >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}
