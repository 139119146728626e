package xds

import (
	"io"
	"log/slog"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/internal/testwait"
	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoWithPorts is demo/echo with a port for each number.
func echoWithPorts(ports ...uint32) *federationpb.Service {
	s := &federationpb.Service{
		Namespace: "demo", Name: "echo", Hostname: "echo.demo.svc.cluster.local",
		Type:   federationpb.ServiceType_SERVICE_TYPE_CLUSTER_IP,
		Export: &federationpb.Export{Source: federationpb.ExportSource_EXPORT_SOURCE_LABEL, Time: timestamppb.New(time.Unix(0, 0))},
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, &federationpb.ServicePort{Protocol: federationpb.Protocol_PROTOCOL_TCP, Port: p, TargetPort: p, Name: "p" + string(rune('a'+p%26))})
	}
	return s
}

// TestPushLoopDebounces drives the push loop with a fake clock: a lone
// change is pushed at once; a change within the push interval of the
// previous push waits for it, and the changes made meanwhile go out with
// it in one push.
func TestPushLoopDebounces(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	reg := prometheus.NewRegistry()
	s, err := New(Config{Addr: "127.0.0.1:0", PushInterval: time.Second, Clock: clk}, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.lis.Close() }()

	c := xdstest.New()
	c.SetCluster(clusterset.ClusterInfo{ID: "east", Network: "n1"})
	c.SetService("east", echoWithPorts(8080))
	first := c.Publish()
	s.push(first, clusterset.Changes{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.loop(t.Context(), first)
	}()
	// The loop ends with the test's context; wait for it so that no
	// goroutine outlives the test.
	t.Cleanup(func() { <-done })
	pushes := func() int { return int(testutil.ToFloat64(s.metrics.pushes)) }
	hasCluster := func(port uint32) bool {
		_, ok := s.Resources(resourcev3.ClusterType, "")[resources.ClusterName(port, "echo.demo.svc.cluster.local")]
		return ok
	}

	c.SetService("east", echoWithPorts(8080, 9001))
	c.Publish()
	testwait.For(t, "the lone change's push", func() bool { return pushes() == 1 })
	if !hasCluster(9001) {
		t.Fatal("the lone change was not pushed")
	}

	c.SetService("east", echoWithPorts(8080, 9002))
	c.Publish()
	// Waiting out the interval, the loop has two timers on the clock: its
	// liveness beat's, which an idle loop has too, and the interval's.
	testwait.For(t, "the loop to wait out the interval", func() bool { return clk.Waiters() == 2 })
	c.SetService("east", echoWithPorts(8080, 9003))
	c.Publish()
	if pushes() != 1 {
		t.Fatal("a change within the interval was pushed before it ended")
	}
	clk.Step(time.Second)
	testwait.For(t, "the coalesced push", func() bool { return pushes() == 2 })
	if !hasCluster(9003) || hasCluster(9002) || hasCluster(9001) {
		t.Errorf("after the coalesced push CDS has 9001 %v, 9002 %v, 9003 %v; want 9003 alone", hasCluster(9001), hasCluster(9002), hasCluster(9003))
	}

	clk.Step(2 * time.Second) // quiet
	c.SetService("east", echoWithPorts(8080, 9004))
	c.Publish()
	testwait.For(t, "the push of a change after a quiet period", func() bool { return pushes() == 3 })
	if !hasCluster(9004) {
		t.Error("the change after a quiet period was not pushed")
	}
}
