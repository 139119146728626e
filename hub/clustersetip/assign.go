package clustersetip

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/meshfed/meshfed/clusterset"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// DefaultCIDRs are the default pools: IPv4 in 240.0.0.0/4, reserved
// ("class E") and so in no cluster's pod, service or node ranges (Istio
// allocates ServiceEntry VIPs from 240.240.0.0/16 for the same reason;
// this pool stays clear of it), and an IPv6 unique local prefix.
const DefaultCIDRs = "240.242.0.0/16,fd6d:6673:6574::/64"

// Pools are the CIDRs ClusterSetIPs come from, at most one per family.
type Pools struct {
	V4, V6 netip.Prefix
}

// ParsePools parses a comma-separated list of at most one IPv4 and one
// IPv6 CIDR.
func ParsePools(s string) (Pools, error) {
	var p Pools
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		pre, err := netip.ParsePrefix(f)
		if err != nil {
			return Pools{}, fmt.Errorf("clusterset CIDR %q: %w", f, err)
		}
		if pre.Masked() != pre {
			return Pools{}, fmt.Errorf("clusterset CIDR %q has host bits set (did you mean %s?)", f, pre.Masked())
		}
		slot, min := &p.V4, 30
		if pre.Addr().Is6() {
			slot, min = &p.V6, 126
		}
		if pre.Bits() > min {
			return Pools{}, fmt.Errorf("clusterset CIDR %q is too small: at most /%d", f, min)
		}
		if slot.IsValid() {
			return Pools{}, fmt.Errorf("clusterset CIDRs %s and %s are of one family: give at most one IPv4 and one IPv6 CIDR", *slot, pre)
		}
		*slot = pre
	}
	if !p.V4.IsValid() && !p.V6.IsValid() {
		return Pools{}, errors.New("no clusterset CIDR given")
	}
	return p, nil
}

func (p Pools) String() string {
	var s []string
	for _, pre := range []netip.Prefix{p.V4, p.V6} {
		if pre.IsValid() {
			s = append(s, pre.String())
		}
	}
	return strings.Join(s, ",")
}

func (p Pools) pool(f federationpb.IPFamily) netip.Prefix {
	if f == federationpb.IPFamily_IP_FAMILY_IPV6 {
		return p.V6
	}
	return p.V4
}

// Import is one ClusterSetIP import that needs IPs.
type Import struct {
	Key string // namespace/name
	// Since is the oldest export's time: the older import keeps an IP two
	// imports claim.
	Since    time.Time
	Families []federationpb.IPFamily
	// Claims are the IPs the member clusters hold for the import, each
	// with the number of clusters that hold it.
	Claims []Claim
}

// Claim is an IP some member clusters hold for an import.
type Claim struct {
	Addr    netip.Addr
	Holders int
}

// Result is an import's assignment.
type Result struct {
	// IPs has one IP per family of the import, in its order; an invalid
	// address where Err says why there is none.
	IPs []netip.Addr
	Err string
}

// Collision is an IP two imports claimed, and which kept it.
type Collision struct {
	Addr netip.Addr
	// Kept by Winner; Loser got another IP.
	Winner, Loser string
}

func (c Collision) String() string {
	return fmt.Sprintf("imports %s and %s both hold ClusterSetIP %s; the older, %s, keeps it", c.Winner, c.Loser, c.Addr, c.Winner)
}

// Assign gives every import its IPs. The result depends only on the
// values of pools and imports, not on the order of imports or of their
// claims.
func Assign(pools Pools, imports []Import) (map[string]Result, []Collision) {
	order := slices.Clone(imports)
	slices.SortFunc(order, func(a, b Import) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Key, b.Key))
	})
	taken := map[netip.Addr]string{}
	out := make(map[string]Result, len(order))
	var collisions []Collision
	// Claims first, oldest import first, for every import: a new import
	// never takes the IP an older one's clusters hold, whatever its hash.
	for _, im := range order {
		r := Result{IPs: make([]netip.Addr, len(im.Families))}
		for i, f := range im.Families {
			pool := pools.pool(f)
			if !pool.IsValid() {
				continue
			}
			for _, c := range bestClaims(im.Claims, pool) {
				if owner, ok := taken[c]; ok {
					if owner != im.Key {
						collisions = append(collisions, Collision{Addr: c, Winner: owner, Loser: im.Key})
					}
					continue
				}
				taken[c] = im.Key
				r.IPs[i] = c
				break
			}
		}
		out[im.Key] = r
	}
	for _, im := range order {
		r := out[im.Key]
		var errs []string
		for i, f := range im.Families {
			if r.IPs[i].IsValid() {
				continue
			}
			pool := pools.pool(f)
			if !pool.IsValid() {
				errs = append(errs, fmt.Sprintf("no clusterset CIDR of family %s", clusterset.IPFamilyName(f)))
				continue
			}
			a, ok := probe(pool, derive(im.Key, f, pool), taken)
			if !ok {
				errs = append(errs, fmt.Sprintf("clusterset CIDR %s is exhausted", pool))
				continue
			}
			taken[a] = im.Key
			r.IPs[i] = a
		}
		r.Err = strings.Join(errs, "; ")
		out[im.Key] = r
	}
	slices.SortFunc(collisions, func(a, b Collision) int {
		return cmp.Or(a.Addr.Compare(b.Addr), strings.Compare(a.Loser, b.Loser))
	})
	return out, collisions
}

// bestClaims returns an import's claims in pool, the most held first,
// then the lowest address.
func bestClaims(claims []Claim, pool netip.Prefix) []netip.Addr {
	var in []Claim
	for _, c := range claims {
		if pool.Contains(c.Addr) && usable(pool, c.Addr) {
			in = append(in, c)
		}
	}
	slices.SortFunc(in, func(a, b Claim) int {
		return cmp.Or(cmp.Compare(b.Holders, a.Holders), a.Addr.Compare(b.Addr))
	})
	out := make([]netip.Addr, len(in))
	for i, c := range in {
		out[i] = c.Addr
	}
	return out
}

// size is the number of addresses of pool, capped at 2^62 so that offsets
// are uint64 arithmetic.
func size(pool netip.Prefix) uint64 {
	host := pool.Addr().BitLen() - pool.Bits()
	if host >= 62 {
		return 1 << 62
	}
	return 1 << host
}

// usable reports whether a is an address to hand out: not the pool's
// first address, nor an IPv4 pool's last (network and broadcast).
func usable(pool netip.Prefix, a netip.Addr) bool {
	if a == pool.Addr() {
		return false
	}
	if a.Is4() {
		return a != at(pool, size(pool)-1)
	}
	return true
}

// derive is the offset an import's hash points at.
func derive(key string, f federationpb.IPFamily, pool netip.Prefix) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0, byte(f)})
	return h.Sum64() % size(pool)
}

// probe returns the first free, usable address from offset up, wrapping
// around the pool; false when every address is taken.
func probe(pool netip.Prefix, offset uint64, taken map[netip.Addr]string) (netip.Addr, bool) {
	n := size(pool)
	for i := range n {
		a := at(pool, (offset+i)%n)
		if _, ok := taken[a]; !ok && usable(pool, a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// at is the address offset places above the pool's first.
func at(pool netip.Prefix, offset uint64) netip.Addr {
	if pool.Addr().Is4() {
		b := pool.Addr().As4()
		v := binary.BigEndian.Uint32(b[:]) + uint32(offset)
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	}
	b := pool.Addr().As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	sum, carry := bits.Add64(lo, offset, 0)
	binary.BigEndian.PutUint64(b[:8], hi+carry)
	binary.BigEndian.PutUint64(b[8:], sum)
	return netip.AddrFrom16(b)
}
