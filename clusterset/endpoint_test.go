package clusterset

import (
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/federationtest"
)

// fullEndpoint is a valid endpoint with every field set.
func fullEndpoint() *federationpb.Endpoint {
	e := federationtest.Endpoint()
	e.Ports[0].AppProtocol = "grpc"
	e.Serving, e.Terminating, e.Node, e.Locality.Subzone = true, true, "node-1", "s1"
	e.Workload = &federationpb.WorkloadRef{Kind: "Pod", Name: "echo-1", Uid: "uid-1"}
	e.Hostname, e.Network, e.Plaintext = "echo-1", "n2", true
	return e
}

// eachChangeDiffers checks that every change of a message makes an object
// that base is not Equal to, either way round.
func eachChangeDiffers[M any, T interface{ Equal(T) bool }](t *testing.T, base T, fresh func() M, convert func(M) T, changes map[string]func(M)) {
	t.Helper()
	for name, change := range changes {
		m := fresh()
		change(m)
		if other := convert(m); base.Equal(other) || other.Equal(base) {
			t.Errorf("objects that differ in %s are equal", name)
		}
	}
}

// TestEndpointKeepsEveryField: the hub's form holds every field the
// message defines, and gives them back alike.
func TestEndpointKeepsEveryField(t *testing.T) {
	want := fullEndpoint()
	if n := want.ProtoReflect().Descriptor().Fields().Len(); n != 13 {
		t.Fatalf("the Endpoint message has %d fields, this test and Endpoint know 13: add the new one to both", n)
	}
	if n := want.GetWorkload().ProtoReflect().Descriptor().Fields().Len(); n != 3 {
		t.Fatalf("the WorkloadRef message has %d fields, this test and Endpoint know 3: add the new one to both", n)
	}
	for _, pb := range []*federationpb.Endpoint{want, {Address: "10.0.0.2"}, {Address: "10.0.0.3", Workload: &federationpb.WorkloadRef{}}} {
		in := NewInterner()
		for _, e := range []*Endpoint{NewEndpoint(pb), in.Endpoint(nil, pb, nil)} {
			if got := e.Proto(); !proto.Equal(got, pb) {
				t.Errorf("round trip:\n got %v\nwant %v", got, pb)
			}
		}
	}
	e := NewEndpoint(want)
	ref, ok := e.Workload()
	if !ok || ref != (WorkloadRef{Kind: "Pod", Name: "echo-1", UID: "uid-1"}) {
		t.Errorf("Workload() = %+v, %v", ref, ok)
	}
	if _, ok := NewEndpoint(&federationpb.Endpoint{}).Workload(); ok {
		t.Error("an endpoint without a workload reference has one")
	}
	var none *Endpoint
	if none.GetAddress() != "" || none.GetPorts() != nil || none.GetReady() || none.GetLocality() != nil || none.GetNamespace() != "" {
		t.Error("a nil endpoint's getters are not zero")
	}
}

func TestEndpointEqual(t *testing.T) {
	base := NewEndpoint(fullEndpoint())
	same := NewInterner().Endpoint(nil, fullEndpoint(), nil)
	if !base.Equal(same) || !same.Equal(base) {
		t.Error("equal endpoints from two interners differ")
	}
	eachChangeDiffers(t, base, fullEndpoint, NewEndpoint, map[string]func(*federationpb.Endpoint){
		"address":       func(e *federationpb.Endpoint) { e.Address = "10.0.0.9" },
		"ready":         func(e *federationpb.Endpoint) { e.Ready = false },
		"serving":       func(e *federationpb.Endpoint) { e.Serving = false },
		"terminating":   func(e *federationpb.Endpoint) { e.Terminating = false },
		"node":          func(e *federationpb.Endpoint) { e.Node = "node-2" },
		"hostname":      func(e *federationpb.Endpoint) { e.Hostname = "" },
		"network":       func(e *federationpb.Endpoint) { e.Network = "" },
		"plaintext":     func(e *federationpb.Endpoint) { e.Plaintext = false },
		"namespace":     func(e *federationpb.Endpoint) { e.Namespace = "other" },
		"service":       func(e *federationpb.Endpoint) { e.Service = "other" },
		"port":          func(e *federationpb.Endpoint) { e.Ports[0].Port = 9091 },
		"no ports":      func(e *federationpb.Endpoint) { e.Ports = nil },
		"zone":          func(e *federationpb.Endpoint) { e.Locality.Zone = "z2" },
		"workload name": func(e *federationpb.Endpoint) { e.Workload.Name = "echo-2" },
		"workload uid":  func(e *federationpb.Endpoint) { e.Workload.Uid = "uid-2" },
		"workload kind": func(e *federationpb.Endpoint) { e.Workload.Kind = "Job" },
		"no workload":   func(e *federationpb.Endpoint) { e.Workload = nil },
	})
	if base.Equal(nil) || !(*Endpoint)(nil).Equal(nil) {
		t.Error("nil is equal to an endpoint, or not to itself")
	}
}

// TestInternerSharesEndpointGroups: endpoints of one service, zone and
// ports share one group whatever their node; an endpoint reads its node
// and reference from the workload it names, and shares its address.
func TestInternerSharesEndpointGroups(t *testing.T) {
	in := NewInterner()
	a, b, c := fullEndpoint(), fullEndpoint(), fullEndpoint()
	b.Address, b.Node = "10.0.0.2", "node-2"
	c.Address, c.Locality.Zone = "10.0.0.3", "z2"
	w := NewWorkload("east", &federationpb.Workload{Uid: "uid-1", Name: "echo-1", Node: "node-1", Ips: []string{"10.0.0.1"}})
	ea, eb, ec := in.Endpoint(nil, a, w), in.Endpoint(nil, b, nil), in.Endpoint(nil, c, nil)
	if ea.endpointGroup != eb.endpointGroup {
		t.Error("two endpoints of one service and zone on two nodes hold two groups")
	}
	if ea.endpointGroup == ec.endpointGroup || ec.GetLocality().GetZone() != "z2" {
		t.Error("endpoints of two zones share a group")
	}
	if eb.GetNode() != "node-2" || ea.GetNode() != "node-1" {
		t.Errorf("nodes %q, %q", ea.GetNode(), eb.GetNode())
	}
	if ea.workload != w || ea.extra == nil || ea.extra.node != "" || ea.extra.workloadUID != "" || ea.extra.hostname != "echo-1" ||
		unsafe.StringData(ea.GetAddress()) != unsafe.StringData(w.GetIps()[0]) {
		t.Errorf("the endpoint holds its own copies of its workload's node, uid, name or address: %+v", ea.extra)
	}
	if ref, _ := eb.Workload(); ref.UID != "uid-1" || eb.workload != nil {
		t.Errorf("uid %q", ref.UID)
	}
	// A reference that differs from the workload in any of what it would
	// read from it keeps its own.
	for name, change := range map[string]func(*federationpb.Endpoint){
		"node": func(e *federationpb.Endpoint) { e.Node = "node-2" },
		"name": func(e *federationpb.Endpoint) { e.Workload.Name = "echo-2" },
		"uid":  func(e *federationpb.Endpoint) { e.Workload.Uid = "uid-2" },
	} {
		pb := fullEndpoint()
		change(pb)
		if e := in.Endpoint(nil, pb, w); e.workload != nil || !proto.Equal(e.Proto(), pb) {
			t.Errorf("%s differs from the workload's: read from it anyway, or lost: %v", name, e.Proto())
		}
	}
	bare := &federationpb.Endpoint{Address: "10.0.0.1", Node: "node-1", Workload: &federationpb.WorkloadRef{Kind: "Pod", Name: "echo-1", Uid: "uid-1"}}
	if e := in.Endpoint(nil, bare, w); e.extra != nil || !proto.Equal(e.Proto(), bare) {
		t.Errorf("an endpoint that is all its workload's holds more: %+v, %v", e.extra, e.Proto())
	}
	if a, b := in.Endpoint(nil, bare, w), in.Endpoint(nil, bare, nil); !a.Equal(b) || !b.Equal(a) {
		t.Error("one endpoint read from its workload and held whole is not equal to itself")
	}
	// The address is found among the workload's, whichever it is, or kept.
	dual := NewWorkload("east", &federationpb.Workload{Uid: "uid-1", Name: "echo-1", Node: "node-1", Ips: []string{"10.0.0.1", "fd00::1"}})
	for _, addr := range []string{"10.0.0.1", "fd00::1", "10.0.0.7"} {
		pb := proto.CloneOf(bare)
		pb.Address = addr
		e := in.Endpoint(nil, pb, dual)
		if e.GetAddress() != addr || !proto.Equal(e.Proto(), pb) || (e.extra != nil) != (addr == "10.0.0.7") {
			t.Errorf("address %s: read as %s, extra %+v", addr, e.GetAddress(), e.extra)
		}
	}
	if unsafe.Sizeof(Endpoint{}) > 32 {
		t.Errorf("an Endpoint is %d bytes, more than its size class of 32", unsafe.Sizeof(Endpoint{}))
	}
}
