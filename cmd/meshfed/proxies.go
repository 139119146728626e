package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/internal/cli"
	"github.com/meshfed/meshfed/xds"
)

// hubTarget is where a command finds the hub's debug port: its address,
// or a port-forward through a kubeconfig.
type hubTarget struct {
	debugAddr string
	kube      kubeOptions
}

func (h *hubTarget) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&h.debugAddr, "debug-addr", "127.0.0.1:8080", "the hub's debug address")
	fs.StringVar(&h.kube.kubeconfig, "kubeconfig", "", "reach a hub that runs in a cluster through this kubeconfig, by a port-forward to a hub pod's debug port (as kubectl port-forward does)")
	fs.StringVar(&h.kube.context, "context", "", "the kubeconfig context to use (default: its current context); implies the port-forward, with $KUBECONFIG or ~/.kube/config when --kubeconfig is unset")
	fs.StringVar(&h.kube.namespace, "namespace", "meshfed", "namespace of the hub's pods")
	fs.StringVar(&h.kube.selector, "hub-selector", defaultHubSelector, "label selector of the hub's pods (the hub chart's pod labels)")
}

// hubTargetFlags are the flags of hubTarget, for help groups.
var hubTargetFlags = []string{"debug-addr", "kubeconfig", "context", "namespace", "hub-selector"}

// connector returns how to reach the hub; explicit names the flags given.
func (h *hubTarget) connector(explicit map[string]bool, stderr io.Writer) (connector, error) {
	if !h.kube.enabled() {
		return directHub(h.debugAddr), nil
	}
	if explicit["debug-addr"] {
		return nil, errors.New("--debug-addr and --kubeconfig (or --context) are exclusive: the port-forward finds the hub's debug port")
	}
	return h.kube.connector(stderr), nil
}

// getJSON fetches a debug path from the hub.
func (h *hubTarget) getJSON(ctx context.Context, explicit map[string]bool, stderr io.Writer, path string) ([]byte, error) {
	connect, err := h.connector(explicit, stderr)
	if err != nil {
		return nil, err
	}
	conn, err := connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.close()
	code, body, err := conn.get(ctx, path)
	switch {
	case err != nil:
		return nil, err
	case code == http.StatusNotFound:
		return nil, fmt.Errorf("%s answered 404 to %s: it is not the debug port of a hub that serves xDS", conn.where, strings.Split(path, "?")[0])
	case code != http.StatusOK:
		return nil, fmt.Errorf("%s answered %d %s to %s: %s", conn.where, code, http.StatusText(code), strings.Split(path, "?")[0], firstLine(body))
	}
	return body, nil
}

// writeData writes a hub's JSON answer as JSON or YAML.
func writeData(w io.Writer, format string, data []byte) error {
	if format == "yaml" {
		out, err := yaml.JSONToYAML(data)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

func checkOutput(format string) error {
	switch format {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want table, json or yaml", format)
}

// proxiesOptions are meshfed proxies's flags.
type proxiesOptions struct {
	hub     hubTarget
	output  string
	cluster string
	network string
	timeout time.Duration
}

func proxiesFlags(fs *flag.FlagSet) *proxiesOptions {
	o := &proxiesOptions{}
	o.hub.addFlags(fs)
	fs.StringVar(&o.output, "output", "table", "output format: table, json or yaml (json and yaml are /debug/proxies as the hub serves it, filtered)")
	fs.StringVar(&o.output, "o", "table", "short for --output")
	fs.StringVar(&o.cluster, "cluster", "", "only the proxies of this cluster")
	fs.StringVar(&o.network, "network", "", "only the proxies on this network")
	fs.DurationVar(&o.timeout, "timeout", statusTimeout, "give up after this long")
	return o
}

var proxiesHelp = cli.Help{
	Summary: "Show the proxies connected to a hub replica and, per xDS type, whether they hold the newest state:\n" +
		"SYNCED (ACKed it), STALE (a change is not ACKed yet; BEHIND says since when it was observed) or NACKED (rejected; the reason follows the table).",
	Groups: []cli.FlagGroup{
		{Title: "Where the hub is", Flags: hubTargetFlags},
		{Title: "Which proxies, and how", Flags: []string{"cluster", "network", "output", "timeout"}},
	},
	Aliases: map[string]string{"o": "output"},
	Examples: []string{
		"# Every proxy of this hub replica\nmeshfed proxies",
		"# The proxies of cluster east on network n1, as JSON\nmeshfed proxies --cluster east --network n1 -o json",
	},
}

func runProxies(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed proxies", stderr)
	o := proxiesFlags(fs)
	proxiesHelp.Install(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	body, err := o.hub.getJSON(ctx, explicit, stderr, "/debug/proxies")
	if err != nil {
		return err
	}
	var resp struct {
		Proxies []xds.ProxyStatus `json:"proxies"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return fmt.Errorf("/debug/proxies is not what a hub serves: %w", err)
	}
	resp.Proxies = slices.DeleteFunc(resp.Proxies, func(p xds.ProxyStatus) bool {
		return (o.cluster != "" && p.Cluster != o.cluster) || (o.network != "" && p.Network != o.network)
	})
	if o.output != "table" {
		data, err := json.Marshal(resp)
		if err != nil {
			return err
		}
		return writeData(stdout, o.output, data)
	}
	return printProxies(stdout, resp.Proxies)
}

// proxyTypes are the types the table has a column for, by type URL.
var proxyTypes = []struct{ column, typeURL string }{
	{"CDS", "type.googleapis.com/envoy.config.cluster.v3.Cluster"},
	{"LDS", "type.googleapis.com/envoy.config.listener.v3.Listener"},
	{"RDS", "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"},
	{"EDS", "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"},
	{"ADDRESS", "type.googleapis.com/istio.workload.Address"},
}

// printProxies writes one row per proxy: who it is, and per type its
// state and the version it ACKed; the reasons of NACKs follow.
func printProxies(w io.Writer, proxies []xds.ProxyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "PROXY\tKIND\tCLUSTER\tNETWORK\tLOCALITY")
	for _, t := range proxyTypes {
		fmt.Fprint(tw, "\t"+t.column)
	}
	fmt.Fprintln(tw, "\tBEHIND")
	var nacks []string
	for _, p := range proxies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", p.ID, p.Kind, orDash(p.Cluster), orDash(p.Network), orDash(p.Locality))
		behind := 0.0
		for _, col := range proxyTypes {
			t, ok := p.Types[col.typeURL]
			if !ok {
				fmt.Fprint(tw, "\t-")
				continue
			}
			cell := t.State
			if v := t.AckedVersion; v != "" {
				cell += " " + shortVersion(v)
			}
			fmt.Fprint(tw, "\t"+cell)
			behind = max(behind, t.BehindSeconds)
			if t.State == xds.StateNacked {
				nacks = append(nacks, fmt.Sprintf("%s: %s NACKED: %s", p.ID, col.column, t.NackReason))
			}
		}
		if behind > 0 {
			fmt.Fprintf(tw, "\t%s\n", time.Duration(behind*float64(time.Second)).Round(time.Millisecond))
		} else {
			fmt.Fprint(tw, "\t-\n")
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range nacks {
		fmt.Fprintln(w, n)
	}
	return nil
}

// shortVersion keeps the first 8 characters of a version hash.
func shortVersion(v string) string {
	if len(v) > 8 {
		return v[:8]
	}
	return v
}

// explainOptions are meshfed explain's flags.
type explainOptions struct {
	hub      hubTarget
	output   string
	proxy    string
	service  string
	endpoint string
	timeout  time.Duration
}

func explainFlags(fs *flag.FlagSet) *explainOptions {
	o := &explainOptions{}
	o.hub.addFlags(fs)
	fs.StringVar(&o.output, "output", "table", "output format: table, json or yaml (json and yaml are /debug/explain as the hub serves it)")
	fs.StringVar(&o.output, "o", "table", "short for --output")
	fs.StringVar(&o.proxy, "proxy", "", "the proxy's ID (its xDS node ID, as meshfed proxies lists it)")
	fs.StringVar(&o.service, "service", "", "the service: HOST[:PORT], its cluster-local or clusterset hostname or a ClusterSetIP")
	fs.StringVar(&o.endpoint, "endpoint", "", "one endpoint's address, to follow it alone")
	fs.DurationVar(&o.timeout, "timeout", statusTimeout, "give up after this long")
	return o
}

var explainHelp = cli.Help{
	Summary: "Explain why a proxy does or does not see a service's endpoints: the path from the clusters to the proxy,\n" +
		"step by step with its verdict (exported by whom, the clusters' leases, the endpoint, its network or gateway,\n" +
		"its priority and weight in the proxy's assignment, the proxy's subscription and what it ACKed).",
	Groups: []cli.FlagGroup{
		{Title: "What to explain", Flags: []string{"proxy", "service", "endpoint"}},
		{Title: "Where the hub is", Flags: hubTargetFlags},
		{Title: "Output", Flags: []string{"output", "timeout"}},
	},
	Aliases: map[string]string{"o": "output"},
	Examples: []string{
		"# Does this gRPC client see echo's endpoints?\nmeshfed explain --proxy client-1 --service echo.demo.svc.cluster.local:8080",
		"# Why does it not reach that pod?\nmeshfed explain --proxy client-1 --service echo.demo.svc.cluster.local:8080 --endpoint 10.2.0.7",
	},
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("meshfed explain", stderr)
	o := explainFlags(fs)
	explainHelp.Install(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.proxy == "" || o.service == "" {
		return errors.New("--proxy and --service are required")
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	q := url.Values{"proxy": {o.proxy}, "service": {o.service}}
	if o.endpoint != "" {
		q.Set("endpoint", o.endpoint)
	}
	body, err := o.hub.getJSON(ctx, explicit, stderr, "/debug/explain?"+q.Encode())
	if err != nil {
		return err
	}
	if o.output != "table" {
		return writeData(stdout, o.output, body)
	}
	var ex xds.Explanation
	if err := json.Unmarshal(body, &ex); err != nil {
		return fmt.Errorf("/debug/explain is not what a hub serves: %w", err)
	}
	return printExplanation(stdout, ex)
}

// printExplanation writes one line per step, then the answer.
func printExplanation(w io.Writer, ex xds.Explanation) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range ex.Steps {
		mark := map[string]string{xds.VerdictOK: "ok", xds.VerdictNo: "NO", xds.VerdictInfo: "·"}[s.Verdict]
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, s.Step, s.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	what := "its endpoints"
	if ex.Endpoint != "" {
		what = ex.Endpoint
	}
	verdict := "does not see"
	if ex.Sees {
		verdict = "sees"
	}
	_, err := fmt.Fprintf(w, "\n%s %s %s of %s\n", ex.Proxy, verdict, what, ex.Service)
	return err
}
