package registry

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
	"github.com/meshfed/meshfed/hub/policy"
)

func mustPolicy(t *testing.T, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(yaml), "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const twoClusters = `
clusters:
- id: east
  networks: [n1]
  cidrs: {endpoints: [10.0.0.0/16]}
  limits: {maxEndpoints: 2}
  leases: {staleAfter: 5s}
- id: west
  networks: [n2]
`

func TestPolicyRefusesAndKeepsTheLastGoodState(t *testing.T) {
	r := New(Config{Policy: mustPolicy(t, twoClusters)})
	east, west := r.Connect("east", ""), r.Connect("west", "")
	must(t, west.Apply("s", full("west", "n2", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.1.0.1")}, nil)))
	must(t, east.Apply("s", full("east", "n1", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.0.0.1")}, nil)))
	before := r.Current()

	refused := []struct {
		name  string
		u     *federationpb.ShardUpdate
		field string
	}{
		{"east claims west's network", &federationpb.ShardUpdate{Version: 2, Cluster: &federationpb.Cluster{Id: "east", Network: "n2"}}, "network"},
		{"east gateway for west's network", &federationpb.ShardUpdate{Version: 2, Cluster: &federationpb.Cluster{Id: "east", Network: "n1", Gateways: []*federationpb.Gateway{{
			Address: "203.0.113.1", Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, Network: "n2", Service: "istio-system/eastwest",
		}}}}, "gateways[0].network"},
		{"east endpoint outside its CIDRs", &federationpb.ShardUpdate{Version: 2, Endpoints: []*federationpb.Endpoint{ep("echo", "10.1.0.9")}}, "address"},
	}
	for i, tt := range refused {
		err := east.Apply("s", tt.u)
		var verr *federation.ValidationError
		if !errors.Is(err, federation.ErrNotAllowed) || !errors.As(err, &verr) || verr.Field != tt.field {
			t.Errorf("%s: Apply() = %v; want refused by the policy at field %q", tt.name, err, tt.field)
		}
		st := status(t, r, "east")
		if st.PolicyRefusals != uint64(i+1) {
			t.Errorf("%s: %d policy refusals counted, want %d", tt.name, st.PolicyRefusals, i+1)
		}
	}
	if r.Current() != before {
		t.Error("a refused update published a snapshot")
	}
	if c, _ := r.Current().Cluster("west"); c.Network != "n2" {
		t.Errorf("west's network is %q, want n2", c.Network)
	}
	// The cluster's own caps, not the hub's (none).
	err := east.Apply("s", &federationpb.ShardUpdate{Version: 2, Endpoints: []*federationpb.Endpoint{ep("echo", "10.0.0.2"), ep("echo", "10.0.0.3")}})
	if !errors.Is(err, federation.ErrOverLimit) {
		t.Errorf("3 endpoints with the policy's cap of 2: Apply() = %v, want ErrOverLimit", err)
	}
	must(t, east.Apply("s", &federationpb.ShardUpdate{Version: 3, Endpoints: []*federationpb.Endpoint{ep("echo", "10.0.0.2")}}))
}

func TestPolicyAdmitsAndExpectsItsClusters(t *testing.T) {
	r := New(Config{Leases: LeasePolicy{StaleAfter: time.Minute, WithdrawAfter: time.Hour}})
	if err := r.Admit("north"); err != nil {
		t.Fatalf("without a policy every cluster is admitted: %v", err)
	}
	r.SetPolicy(mustPolicy(t, twoClusters))
	if err := r.Admit("north"); !errors.Is(err, federation.ErrNotAllowed) {
		t.Errorf("Admit(north) = %v, want ErrNotAllowed", err)
	}
	if err := r.Admit("east"); err != nil {
		t.Errorf("Admit(east) = %v", err)
	}
	if !r.MembershipKnown() || !slices.Equal(r.Members(), []federation.ClusterID{"east", "west"}) {
		t.Errorf("members %v (known %v); want the policy's clusters", r.Members(), r.MembershipKnown())
	}
	// A spoke's Hello cannot add a cluster the policy does not name.
	if n := r.Expect([]federation.ClusterID{"north", "east"}); n != 0 {
		t.Errorf("Expect() added %d clusters, want 0", n)
	}
	if got := r.LeasesFor("east"); got != (LeasePolicy{StaleAfter: 5 * time.Second, WithdrawAfter: time.Hour}) {
		t.Errorf("LeasesFor(east) = %+v; want its stale-after and the hub's withdraw-after", got)
	}
	if got := r.LeasesFor("west"); got != (LeasePolicy{StaleAfter: time.Minute, WithdrawAfter: time.Hour}) {
		t.Errorf("LeasesFor(west) = %+v; want the hub's", got)
	}
	if got := r.LimitsFor("east"); got.MaxEndpoints != 2 {
		t.Errorf("LimitsFor(east) = %+v", got)
	}
}

func TestPolicyReloadCutsClustersItNoLongerNames(t *testing.T) {
	r := New(Config{Policy: mustPolicy(t, twoClusters)})
	west := r.Connect("west", "")
	must(t, west.Apply("s", full("west", "n2", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.1.0.1")}, nil)))
	r.SetPolicy(mustPolicy(t, "clusters:\n- id: east\n  networks: [n1]\n"))
	select {
	case <-west.Superseded():
	default:
		t.Fatal("west's stream still holds its shard after the policy dropped west")
	}
	if err := west.Apply("s", &federationpb.ShardUpdate{Version: 2, Endpoints: []*federationpb.Endpoint{ep("echo", "10.1.0.2")}}); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Apply() through the cut stream = %v, want ErrSuperseded", err)
	}
	if st := status(t, r, "west"); st.Connected || st.DisconnectedAt.IsZero() {
		t.Errorf("west after the reload: %+v; want disconnected, its lease running", st)
	}
}

func status(t *testing.T, r *Registry, id federation.ClusterID) ClusterStatus {
	t.Helper()
	for _, st := range r.Status() {
		if st.ID == id {
			return st
		}
	}
	t.Fatalf("no status for cluster %q", id)
	return ClusterStatus{}
}

func TestClaimTwoSpokesDoNotFlap(t *testing.T) {
	r := New(Config{})
	a, err := r.Claim("east", "", "session-a", "10.0.0.1:1000")
	must(t, err)
	must(t, a.Apply("session-a", full("east", "n1", 1, nil, nil, nil)))

	// A second spoke (another session) takes the live stream over.
	b, err := r.Claim("east", "", "session-b", "10.0.0.2:2000")
	must(t, err)
	must(t, b.Apply("session-b", full("east", "n1", 1, nil, nil, nil)))
	select {
	case <-a.Superseded():
	default:
		t.Fatal("a's stream was not superseded")
	}
	// a's spoke reconnects: refused while b streams, again and again.
	for range 3 {
		if c, err := r.Claim("east", "", "session-a", "10.0.0.1:1001"); !errors.Is(err, ErrHeld) || c != nil {
			t.Fatalf("displaced spoke: Claim() = %v, %v; want ErrHeld", c, err)
		}
	}
	st := status(t, r, "east")
	if st.Supersessions != 1 || st.DuplicateRefusals != 3 || st.Peer != "10.0.0.2:2000" {
		t.Errorf("status %+v; want 1 supersession, 3 refusals, b's peer", st)
	}
	if !strings.Contains(st.Duplicate, "10.0.0.2:2000 holds it, 10.0.0.1:1001 was refused") {
		t.Errorf("duplicate condition %q does not name both spokes", st.Duplicate)
	}
	// b reconnecting (its old stream half-open) takes its own stream over.
	b2, err := r.Claim("east", "", "session-b", "10.0.0.2:2001")
	must(t, err)
	// Once b has gone, a may have the cluster back.
	b2.Close()
	a2, err := r.Claim("east", "", "session-a", "10.0.0.1:1002")
	must(t, err)
	if st := status(t, r, "east"); st.Duplicate != "" || !st.Connected {
		t.Errorf("after b left and a came back: %+v", st)
	}
	// A restarted spoke pod (a new session) replaces a live one, as a
	// rollout does, and the pod it replaced is displaced.
	if _, err := r.Claim("east", "", "session-c", "10.0.0.3:3000"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a2.Superseded():
	default:
		t.Error("a new spoke pod did not take over")
	}
	// Streams that name no session (tests, old spokes) never displace.
	if _, err := r.Claim("east", "", "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Claim("east", "", "session-c", ""); err != nil {
		t.Errorf("a session-less stream displaced session c: %v", err)
	}
}

func TestPolicyReloadDropsWhatItNoLongerAllows(t *testing.T) {
	r := New(Config{Policy: mustPolicy(t, "clusters:\n- id: east\n  networks: [n1]\n- id: west\n  networks: [n2]\n")})
	east, west := r.Connect("east", ""), r.Connect("west", "")
	other := svc("other")
	other.Namespace, other.Hostname = "other", "other.other.svc.cluster.local"
	otherEP := ep("other", "10.0.9.1")
	otherEP.Namespace = "other"
	gw := &federationpb.Gateway{Address: "203.0.113.1", Port: 15443, Protocol: federationpb.GatewayProtocol_GATEWAY_PROTOCOL_TLS, Network: "n1", Service: "istio-system/eastwest"}
	u := full("east", "n1", 1, []*federationpb.Service{svc("echo"), other},
		[]*federationpb.Endpoint{ep("echo", "10.0.0.1"), ep("echo", "10.7.0.1"), otherEP}, []*federationpb.Workload{wl("u1", "10.0.0.1")})
	u.Cluster.Gateways = []*federationpb.Gateway{gw}
	must(t, east.Apply("s", u))
	must(t, west.Apply("s", full("west", "n2", 1, []*federationpb.Service{svc("echo")}, []*federationpb.Endpoint{ep("echo", "10.1.0.1")}, nil)))

	// East may now export only from demo, endpoints in 10.0.0.0/16, and
	// no gateways outside 198.51.100.0/24.
	got := r.SetPolicy(mustPolicy(t, `
clusters:
- id: east
  networks: [n1]
  exportNamespaces: [demo]
  cidrs: {endpoints: [10.0.0.0/16], gateways: [198.51.100.0/24]}
- id: west
  networks: [n2]
`))
	if len(got) != 1 || got[0].Cluster != "east" || got[0].Dropped != 4 || got[0].Withdrawn || got[0].Reason == "" {
		t.Fatalf("SetPolicy() = %+v; want east with 4 objects dropped (a gateway, a service, 2 endpoints)", got)
	}
	snap := r.Current()
	if eps := endpointsOf(snap, "demo/echo", "east"); !slices.Equal(eps, []string{"10.0.0.1"}) {
		t.Errorf("east's echo endpoints %v; want only the one in its CIDRs", eps)
	}
	if _, ok := snap.Service("other/other"); ok {
		t.Error("other/other, from a namespace east may no longer export, is still served")
	}
	if c, _ := snap.Cluster("east"); len(c.Gateways) != 0 {
		t.Errorf("east's gateways %v; want none", c.Gateways)
	}
	if eps := endpointsOf(snap, "demo/echo", "west"); !slices.Equal(eps, []string{"10.1.0.1"}) {
		t.Errorf("west's endpoints %v; want them untouched", eps)
	}
	// East's stream still holds: its next delta applies.
	must(t, east.Apply("s", &federationpb.ShardUpdate{Version: 2, Endpoints: []*federationpb.Endpoint{ep("echo", "10.0.0.2")}}))

	// East's own network no longer allowed: withdrawn, its stream cut.
	got = r.SetPolicy(mustPolicy(t, "clusters:\n- id: east\n  networks: [n3]\n- id: west\n  networks: [n2]\n"))
	if len(got) != 1 || !got[0].Withdrawn {
		t.Fatalf("SetPolicy() = %+v; want east withdrawn", got)
	}
	select {
	case <-east.Superseded():
	default:
		t.Error("east's stream was not cut")
	}
	if eps := endpointsOf(r.Current(), "demo/echo", "east"); len(eps) != 0 {
		t.Errorf("withdrawn east still serves %v", eps)
	}
}

// endpointsOf returns the addresses of a cluster's endpoints of a service.
func endpointsOf(s clusterset.Snapshot, key string, cluster federation.ClusterID) []string {
	v, ok := s.Service(key)
	if !ok {
		return nil
	}
	var out []string
	for _, c := range v.Clusters {
		if c.Cluster != cluster {
			continue
		}
		for _, e := range c.Endpoints {
			out = append(out, e.GetAddress())
		}
	}
	slices.Sort(out)
	return out
}
