package federation

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation/federationpb"
)

// fullWorkload is a valid workload with every field set.
func fullWorkload() *federationpb.Workload {
	w := validWorkload()
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
		for _, w := range []*Workload{NewWorkload("east", pb), NewInterner().Workload("east", pb)} {
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
}

func TestWorkloadEqual(t *testing.T) {
	base := NewWorkload("east", fullWorkload())
	if same := NewInterner().Workload("east", fullWorkload()); !base.Equal(same) || !same.Equal(base) {
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
	wa, wb, wc := in.Workload("east", a), in.Workload("east", b), in.Workload("east", c)
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
