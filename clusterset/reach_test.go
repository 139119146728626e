package clusterset

import (
	"testing"

	"github.com/meshfed/meshfed/federation/federationpb"
)

func TestServingOf(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		ready, serving, terminating bool
		want                        Serving
	}{
		{"ready", true, true, false, Ready},
		{"ready, no serving condition", true, false, false, Ready},
		{"not ready", false, false, false, NotServed},
		{"serving, not ready", false, true, false, NotServed},
		{"terminating, serving", false, true, true, Draining},
		{"terminating, ready", true, false, true, Draining},
		{"terminating, done", false, false, true, NotServed},
	} {
		e := NewEndpoint(&federationpb.Endpoint{Address: "10.0.0.1", Ready: tc.ready, Serving: tc.serving, Terminating: tc.terminating})
		if got := ServingOf(e); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCountsBehindGateway(t *testing.T) {
	for _, tc := range []struct {
		w    *federationpb.Workload
		want bool
	}{
		{&federationpb.Workload{Uid: "ambient", Ready: true, Ambient: true}, true},
		{&federationpb.Workload{Uid: "injected", Ready: true, MeshTls: true}, true},
		{&federationpb.Workload{Uid: "plaintext", Ready: true}, false},
		{&federationpb.Workload{Uid: "not-ready", Ambient: true}, false},
	} {
		if got := CountsBehindGateway(NewWorkload("east", tc.w)); got != tc.want {
			t.Errorf("%s: counts %v, want %v", tc.w.GetUid(), got, tc.want)
		}
	}
}

func TestBehind(t *testing.T) {
	loc := func(zone string) *federationpb.Locality { return &federationpb.Locality{Region: "r", Zone: zone} }
	ep := func(zone string, ready, terminating bool) *Endpoint {
		return NewEndpoint(&federationpb.Endpoint{Address: "10.0.0.1", Ready: ready, Serving: ready || terminating, Terminating: terminating, Locality: loc(zone)})
	}
	plain := func(zone string) *Endpoint {
		return NewEndpoint(&federationpb.Endpoint{Address: "10.0.0.2", Ready: true, Serving: true, Locality: loc(zone), Plaintext: true})
	}
	unlabelled := func() *Endpoint {
		return NewEndpoint(&federationpb.Endpoint{Address: "10.0.0.3", Ready: true, Serving: true})
	}
	type add struct {
		e     *Endpoint
		stale bool
		rank  int
	}
	for _, tc := range []struct {
		name string
		adds []add
		want Stand
	}{
		{"nothing", nil, Stand{}},
		{"nothing served", []add{{ep("a", false, false), false, 0}}, Stand{}},
		{"plaintext: no gateway forwards to it", []add{{plain("a"), false, 0}}, Stand{}},
		{
			"plaintext ones do not count",
			[]add{{plain("a"), false, 0}, {plain("a"), false, 0}, {ep("b", true, false), false, 0}},
			Stand{Count: 1, Serving: Ready, Locality: Locality{Region: "r", Zone: "b"}},
		},
		{
			"the equally near locality with most endpoints",
			[]add{{ep("a", true, false), false, 0}, {ep("b", true, false), false, 0}, {ep("b", true, false), false, 0}},
			Stand{Count: 3, Serving: Ready, Locality: Locality{Region: "r", Zone: "b"}},
		},
		{
			"a labelled locality before the unlabelled one",
			[]add{{unlabelled(), false, 0}, {ep("z", true, false), false, 0}},
			Stand{Count: 2, Serving: Ready, Locality: Locality{Region: "r", Zone: "z"}},
		},
		{
			"the unlabelled one when it holds most",
			[]add{{unlabelled(), false, 0}, {unlabelled(), false, 0}, {ep("z", true, false), false, 0}},
			Stand{Count: 3, Serving: Ready},
		},
		{
			"most is counted among the nearest only",
			[]add{{ep("a", true, false), false, 2}, {ep("a", true, false), false, 2}, {ep("b", true, false), false, 1}},
			Stand{Count: 3, Serving: Ready, Locality: Locality{Region: "r", Zone: "b"}},
		},
		{
			"ready ones, nearest locality",
			[]add{{ep("c", true, false), false, 2}, {ep("b", true, false), false, 1}, {ep("a", true, false), false, 2}},
			Stand{Count: 3, Serving: Ready, Locality: Locality{Region: "r", Zone: "b"}},
		},
		{
			"the smallest of equally near",
			[]add{{ep("c", true, false), false, 0}, {ep("a", true, false), false, 0}},
			Stand{Count: 2, Serving: Ready, Locality: Locality{Region: "r", Zone: "a"}},
		},
		{
			"draining ones do not count beside ready ones",
			[]add{{ep("a", false, true), false, 0}, {ep("b", true, false), false, 0}},
			Stand{Count: 1, Serving: Ready, Locality: Locality{Region: "r", Zone: "b"}},
		},
		{
			"only draining ones",
			[]add{{ep("a", false, true), false, 0}, {ep("b", false, true), false, 0}},
			Stand{Count: 2, Serving: Draining, Locality: Locality{Region: "r", Zone: "a"}},
		},
		{
			"stale ones do not count beside live ones",
			[]add{{ep("a", true, false), true, 0}, {ep("b", false, true), false, 0}},
			Stand{Count: 1, Serving: Draining, Locality: Locality{Region: "r", Zone: "b"}},
		},
		{
			"only stale ones",
			[]add{{ep("a", true, false), true, 0}, {ep("b", true, false), true, 0}},
			Stand{Count: 2, Serving: Ready, Stale: true, Locality: Locality{Region: "r", Zone: "a"}},
		},
	} {
		var b Behind
		for _, a := range tc.adds {
			b.Add(a.e, a.stale, a.rank)
		}
		if got := b.Stand(); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
