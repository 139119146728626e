package clusterset

import (
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/federation/federationtest"
)

// fullWorkload is a valid workload with every field set.
func fullWorkload() *federationpb.Workload {
	w := federationtest.Workload()
	w.Ips = append(w.Ips, "fd00::1")
	w.ServiceAccount, w.Node, w.Locality = "echo", "node-1", &federationpb.Locality{Region: "r1", Zone: "z1"}
	w.App, w.Version, w.CanonicalName, w.CanonicalRevision, w.Network = "echo", "v1", "echo", "v1", "n2"
	w.Ready, w.Ambient, w.MeshTls = true, true, true
	return w
}

// TestWorkloadKeepsEveryField: the hub's form holds every field the
// message defines, and gives them back alike.
func TestWorkloadKeepsEveryField(t *testing.T) {
	want := fullWorkload()
	if n := want.ProtoReflect().Descriptor().Fields().Len(); n != 15 {
		t.Fatalf("the Workload message has %d fields, this test and Workload know 15: add the new one to both", n)
	}
	for _, pb := range []*federationpb.Workload{want, {Uid: "uid-2"}} {
		for _, w := range []*Workload{NewWorkload("east", pb), NewInterner().Workload(NewTags("east", "n1"), pb)} {
			if w.Key() != "east/"+pb.GetUid() {
				t.Errorf("key %q", w.Key())
			}
			if got := w.Proto(); !proto.Equal(got, pb) {
				t.Errorf("round trip:\n got %v\nwant %v", got, pb)
			}
		}
	}
	var none *Workload
	if none.GetUid() != "" || none.GetIps() != nil || none.GetReady() || none.GetAmbient() || none.GetLocality() != nil {
		t.Error("a nil workload's getters are not zero")
	}
	w := NewWorkload("east", want)
	ips := w.GetIps()
	ips[0] = "changed"
	if w.GetIps()[0] == "changed" {
		t.Error("GetIps hands out the workload's own slice")
	}
	if unsafe.Sizeof(Workload{}) > 48 {
		t.Errorf("a Workload is %d bytes, more than its size class of 48", unsafe.Sizeof(Workload{}))
	}
}

func TestWorkloadEqual(t *testing.T) {
	base := NewWorkload("east", fullWorkload())
	if same := NewInterner().Workload(NewTags("east", ""), fullWorkload()); !base.Equal(same) || !same.Equal(base) {
		t.Error("equal workloads from two interners differ")
	}
	east := func(pb *federationpb.Workload) *Workload { return NewWorkload("east", pb) }
	eachChangeDiffers(t, base, fullWorkload, east, map[string]func(*federationpb.Workload){
		"uid":                func(w *federationpb.Workload) { w.Uid = "uid-2" },
		"name":               func(w *federationpb.Workload) { w.Name = "echo-2" },
		"node":               func(w *federationpb.Workload) { w.Node = "node-2" },
		"ips":                func(w *federationpb.Workload) { w.Ips = w.Ips[:1] },
		"ready":              func(w *federationpb.Workload) { w.Ready = false },
		"namespace":          func(w *federationpb.Workload) { w.Namespace = "other" },
		"service account":    func(w *federationpb.Workload) { w.ServiceAccount = "other" },
		"app":                func(w *federationpb.Workload) { w.App = "other" },
		"version":            func(w *federationpb.Workload) { w.Version = "v2" },
		"canonical name":     func(w *federationpb.Workload) { w.CanonicalName = "other" },
		"canonical revision": func(w *federationpb.Workload) { w.CanonicalRevision = "v2" },
		"network":            func(w *federationpb.Workload) { w.Network = "" },
		"zone":               func(w *federationpb.Workload) { w.Locality.Zone = "z2" },
		"ambient":            func(w *federationpb.Workload) { w.Ambient = false },
		"mesh TLS":           func(w *federationpb.Workload) { w.MeshTls = false },
	})
}

// TestInternerSharesWorkloadGroups: pods alike but for their own fields
// share one group.
func TestInternerSharesWorkloadGroups(t *testing.T) {
	in := NewInterner()
	a, b, c := fullWorkload(), fullWorkload(), fullWorkload()
	b.Uid, b.Name, b.Node, b.Ips, b.Ready = "uid-2", "echo-2", "node-2", []string{"10.0.0.2"}, false
	c.Uid, c.Version = "uid-3", "v2"
	tags := NewTags("east", "n1")
	wa, wb, wc := in.Workload(tags, a), in.Workload(tags, b), in.Workload(tags, c)
	if wa.group != wb.group {
		t.Error("two pods alike but for their own fields hold two groups")
	}
	if wa.group == wc.group || wc.GetVersion() != "v2" {
		t.Error("pods of two versions share a group")
	}
	if wb.GetNode() != "node-2" || wb.GetReady() || wb.GetIps()[0] != "10.0.0.2" {
		t.Errorf("own fields lost: %v", wb.Proto())
	}
}

// TestWorkloadTag: a workload's tag is its cluster and its own network,
// else its cluster's; Retag moves it to its cluster's new network and
// leaves one of its own where it is.
func TestWorkloadTag(t *testing.T) {
	in := NewInterner()
	old, next := NewTags("east", "n1"), NewTags("east", "n3")
	own, plain := fullWorkload(), fullWorkload() // fullWorkload's network is its own
	plain.Uid, plain.Network = "uid-2", ""
	wo, wp := in.Workload(old, own), in.Workload(old, plain)
	if tw := wp.Tagged(); *tw.Tag != (Tag{Cluster: "east", Network: "n1"}) || tw.Workload != wp {
		t.Errorf("tag %+v", *tw.Tag)
	}
	if tw := wo.Tagged(); *tw.Tag != (Tag{Cluster: "east", Network: federation.NetworkID(own.GetNetwork())}) {
		t.Errorf("a workload of a network of its own is tagged %+v", *tw.Tag)
	}
	if in.Retag(next, wo) != wo {
		t.Error("retagging a workload of a network of its own made a new one")
	}
	moved := in.Retag(next, wp)
	if moved == wp || moved.Tagged().Network != "n3" || wp.Tagged().Network != "n1" {
		t.Errorf("retagged to %q (the old one now %q)", moved.Tagged().Network, wp.Tagged().Network)
	}
	if moved.Equal(wp) || !proto.Equal(moved.Proto(), wp.Proto()) {
		t.Error("a retagged workload is equal to the old one, or lost a field")
	}
	var none *Workload
	if tw := none.Tagged(); tw.Tag == nil || tw.Cluster != "" {
		t.Errorf("a nil workload's tag: %+v", tw.Tag)
	}
}
