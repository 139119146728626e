package clustersetip

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshfed/meshfed/federation/federationpb"
)

var (
	v4   = []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4}
	dual = []federationpb.IPFamily{federationpb.IPFamily_IP_FAMILY_IPV4, federationpb.IPFamily_IP_FAMILY_IPV6}
	t0   = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func mustPools(t testing.TB, s string) Pools {
	t.Helper()
	p, err := ParsePools(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func imports(n int, fams []federationpb.IPFamily) []Import {
	out := make([]Import, n)
	for i := range out {
		out[i] = Import{Key: fmt.Sprintf("ns/svc-%d", i), Since: t0.Add(time.Duration(i) * time.Second), Families: fams}
	}
	return out
}

func TestParsePools(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: DefaultCIDRs, want: DefaultCIDRs},
		{in: " 10.0.0.0/24 ", want: "10.0.0.0/24"},
		{in: "fd00::/64", want: "fd00::/64"},
		{in: "", err: "no clusterset CIDR"},
		{in: "10.0.0.1/24", err: "host bits set (did you mean 10.0.0.0/24?)"},
		{in: "10.0.0.0/24,10.1.0.0/24", err: "of one family"},
		{in: "10.0.0.0/31", err: "too small"},
		{in: "not-a-cidr", err: `clusterset CIDR "not-a-cidr"`},
	} {
		got, err := ParsePools(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePools(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("ParsePools(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// check verifies the invariants every assignment keeps: one IP per family
// from that family's pool, never the pool's network or broadcast address,
// and no IP twice.
func check(t *testing.T, pools Pools, ims []Import, got map[string]Result) {
	t.Helper()
	seen := map[netip.Addr]string{}
	for _, im := range ims {
		r, ok := got[im.Key]
		if !ok {
			t.Fatalf("no result for %s", im.Key)
		}
		if len(r.IPs) != len(im.Families) {
			t.Fatalf("%s: %d IPs for %d families", im.Key, len(r.IPs), len(im.Families))
		}
		for i, a := range r.IPs {
			if !a.IsValid() {
				if r.Err == "" {
					t.Errorf("%s: no IP of family %s and no error", im.Key, im.Families[i])
				}
				continue
			}
			pool := pools.pool(im.Families[i])
			if !pool.Contains(a) || !usable(pool, a) {
				t.Errorf("%s: %s is not a usable address of %s", im.Key, a, pool)
			}
			if other, dup := seen[a]; dup {
				t.Errorf("%s and %s both got %s", other, im.Key, a)
			}
			seen[a] = im.Key
		}
	}
}

func TestAssignIsAFunctionOfTheInputsValues(t *testing.T) {
	pools := mustPools(t, "10.9.0.0/28,fd00::/120") // 14 usable IPv4 addresses: collisions of hashes are many
	ims := imports(12, dual)
	ims[3].Claims = []Claim{{netip.MustParseAddr("10.9.0.7"), 2}, {netip.MustParseAddr("fd00::9"), 1}}
	ims[8].Claims = []Claim{{netip.MustParseAddr("10.9.0.7"), 3}} // an older import holds it
	want, wantCollisions := Assign(pools, ims)
	check(t, pools, ims, want)
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		shuffled := slices.Clone(ims)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got, collisions := Assign(pools, shuffled)
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Fatalf("another order of the same imports gave (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantCollisions, collisions, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Fatalf("collisions (-want +got):\n%s", diff)
		}
	}
}

func TestAssignKeepsHeldIPs(t *testing.T) {
	pools := mustPools(t, "10.9.0.0/24")
	ims := imports(50, v4)
	first, _ := Assign(pools, ims)
	check(t, pools, ims, first)
	// The clusters now hold what the hub handed out.
	held := func(ims []Import, rs map[string]Result) []Import {
		out := slices.Clone(ims)
		for i := range out {
			out[i].Claims = []Claim{{rs[out[i].Key].IPs[0], 3}}
		}
		return out
	}
	ims = held(ims, first)
	// Imports come and go, older ones than all included, whose hashes
	// point anywhere: no held IP moves.
	more := append(slices.Clone(ims[10:]), imports(200, v4)[50:]...)
	for i := range 20 {
		more = append(more, Import{Key: fmt.Sprintf("old/svc-%d", i), Since: t0.Add(-time.Hour), Families: v4})
	}
	second, collisions := Assign(pools, more)
	check(t, pools, more, second)
	if len(collisions) != 0 {
		t.Errorf("collisions %v", collisions)
	}
	for _, im := range ims[10:] {
		if got, want := second[im.Key].IPs[0], first[im.Key].IPs[0]; got != want {
			t.Errorf("%s moved from %s to %s", im.Key, want, got)
		}
	}
}

func TestAssignCollisionOlderKeeps(t *testing.T) {
	pools := mustPools(t, "10.9.0.0/24")
	a := netip.MustParseAddr("10.9.0.42")
	ims := []Import{
		{Key: "ns/young", Since: t0, Families: v4, Claims: []Claim{{a, 3}}},
		{Key: "ns/old", Since: t0.Add(-time.Hour), Families: v4, Claims: []Claim{{a, 1}}},
	}
	got, collisions := Assign(pools, ims)
	check(t, pools, ims, got)
	if got["ns/old"].IPs[0] != a || got["ns/young"].IPs[0] == a {
		t.Errorf("got %v, want ns/old to keep %s", got, a)
	}
	want := []Collision{{Addr: a, Winner: "ns/old", Loser: "ns/young"}}
	if diff := cmp.Diff(want, collisions, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("collisions (-want +got):\n%s", diff)
	}
	if s := collisions[0].String(); !strings.Contains(s, "ns/old") || !strings.Contains(s, "10.9.0.42") {
		t.Errorf("collision says %q", s)
	}
}

func TestAssignPrefersTheMostHeldClaim(t *testing.T) {
	pools := mustPools(t, "10.9.0.0/24,fd00::/64")
	ims := []Import{{Key: "ns/a", Families: dual, Claims: []Claim{
		{netip.MustParseAddr("10.9.0.9"), 1},
		{netip.MustParseAddr("10.9.0.10"), 2},
		{netip.MustParseAddr("10.10.0.1"), 5}, // outside the pool: ignored
		{netip.MustParseAddr("10.9.0.0"), 5},  // the network address: ignored
		{netip.MustParseAddr("fd00::5"), 1},
	}}}
	got, _ := Assign(pools, ims)
	want := []netip.Addr{netip.MustParseAddr("10.9.0.10"), netip.MustParseAddr("fd00::5")}
	if !slices.Equal(got["ns/a"].IPs, want) {
		t.Errorf("got %v, want %v", got["ns/a"].IPs, want)
	}
}

func TestAssignExhaustion(t *testing.T) {
	pools := mustPools(t, "10.9.0.0/29") // 6 usable addresses
	ims := imports(8, dual)              // and no IPv6 pool
	got, _ := Assign(pools, ims)
	check(t, pools, ims, got)
	var exhausted []string
	for _, im := range ims {
		r := got[im.Key]
		if !strings.Contains(r.Err, "no clusterset CIDR of family IPv6") {
			t.Errorf("%s: error %q, want the missing IPv6 pool named", im.Key, r.Err)
		}
		if !r.IPs[0].IsValid() {
			exhausted = append(exhausted, im.Key)
			if !strings.Contains(r.Err, "10.9.0.0/29 is exhausted") {
				t.Errorf("%s: error %q, want exhaustion", im.Key, r.Err)
			}
		}
	}
	// The youngest imports go without.
	if want := []string{"ns/svc-6", "ns/svc-7"}; !slices.Equal(exhausted, want) {
		t.Errorf("imports without an IPv4 address %v, want %v", exhausted, want)
	}
}

func TestAt(t *testing.T) {
	for _, tc := range []struct {
		pool   string
		offset uint64
		want   string
	}{
		{"10.0.0.0/8", 256 + 3, "10.0.1.3"},
		{"fd00::/64", 1<<32 + 1, "fd00::1:0:1"},
		{"fd00::ffff:ffff:ffff:ff00/56", 0x100, "fd00:0:0:1::"},
	} {
		if got := at(netip.MustParsePrefix(tc.pool), tc.offset); got.String() != tc.want {
			t.Errorf("at(%s, %d) = %s, want %s", tc.pool, tc.offset, got, tc.want)
		}
	}
}

func BenchmarkAssign(b *testing.B) {
	pools := mustPools(b, DefaultCIDRs)
	ims := imports(5000, dual)
	first, _ := Assign(pools, ims)
	for i := range ims {
		ims[i].Claims = []Claim{{first[ims[i].Key].IPs[0], 3}, {first[ims[i].Key].IPs[1], 3}}
	}
	b.ReportAllocs()
	for b.Loop() {
		Assign(pools, ims)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ims)), "ns/import")
}
