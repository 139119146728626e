package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testInputs(t *testing.T) (Inputs, *prometheus.HistogramVec) {
	t.Helper()
	reg := registry.New(registry.Config{})
	eps := []*federationpb.Endpoint{
		{Namespace: "demo", Service: "echo", Address: "10.0.0.1", Ready: true, Locality: &federationpb.Locality{Region: "r", Zone: "a"}},
		{Namespace: "demo", Service: "echo", Address: "10.0.0.2", Locality: &federationpb.Locality{Region: "r", Zone: "a"}},
	}
	if err := reg.Connect("east", "").Apply("s", &federationpb.ShardUpdate{
		Version: 1, Full: true,
		Cluster: &federationpb.Cluster{Id: "east", Network: "n1", Gateways: []*federationpb.Gateway{{Address: "192.0.2.1", Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS}}},
		Services: []*federationpb.Service{{
			Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local", Type: federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
			Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_SERVICE_EXPORT},
		}}, Endpoints: eps,
	}); err != nil {
		t.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshfed_propagation_seconds", Buckets: []float64{0.001, 0.01, 0.1}}, []string{"type", "kind"})
	prom.MustRegister(h)
	return Inputs{Status: reg.Status, Current: reg.Current, Gather: prom.Gather, Now: time.Now}, h
}

func TestState(t *testing.T) {
	in, h := testInputs(t)
	for range 8 {
		h.WithLabelValues("ClusterLoadAssignment", "grpc").Observe(0.005)
	}
	h.WithLabelValues("Address", "ztunnel").Observe(0.05)
	h.WithLabelValues("Address", "ztunnel").Observe(0.05)
	st := in.Build()
	if len(st.Networks) != 1 || st.Networks[0].Name != "n1" || len(st.Networks[0].Clusters) != 1 || st.Networks[0].Gateways[0] != "192.0.2.1:15443" {
		t.Errorf("networks %+v", st.Networks)
	}
	if len(st.Services) != 1 || len(st.Services[0].ClustersetIPs) != 1 || st.Services[0].Endpoints[0] != (EndpointsAt{Cluster: "east", Locality: "r/a/", Ready: 1, Total: 2}) {
		t.Errorf("services %+v", st.Services)
	}
	// Ten observations: eight in (1ms, 10ms], two in (10ms, 100ms].
	p := st.Propagation
	if p.Count != 10 || p.P50 <= 0.001 || p.P50 > 0.01 || p.P99 <= 0.01 || p.P99 > 0.1 {
		t.Errorf("propagation %+v", p)
	}
}

func TestEventsStreamsTheState(t *testing.T) {
	in, _ := testInputs(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Handlers(SourceFunc(in.Build))["GET /ui/events"].ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var event, data string
	for sc.Scan() && data == "" {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = v
		}
	}
	var st State
	if err := json.Unmarshal([]byte(data), &st); err != nil || event != "state" || len(st.Services) != 1 {
		t.Fatalf("first event %q %q: %v", event, data, err)
	}
	cancel() // the page leaves: the handler returns (goleak checks)
}
