package registry

import (
	"fmt"
	"testing"
)

// TestCowEditOfOneClusterTouchesItsGroup: rewriting every workload of one
// cluster copies the buckets of that cluster's group only, and every key
// stays where get finds it.
func TestCowEditOfOneClusterTouchesItsGroup(t *testing.T) {
	key := func(cluster, uid int) string { return fmt.Sprintf("c%03d/uid-%d", cluster, uid) }
	build := newCowEdit(&cowMap[int]{grouped: true})
	for c := range 100 {
		for u := range 100 {
			build.set(key(c, u), c*1000+u)
		}
	}
	base := build.done()
	if base.len != 100*100 {
		t.Fatalf("len %d, want %d", base.len, 100*100)
	}

	edit := newCowEdit(&base)
	for u := range 100 {
		edit.set(key(7, u), -u)
	}
	touched := 0
	for _, owned := range edit.owned {
		if owned {
			touched++
		}
	}
	if touched > cowGroup {
		t.Errorf("one cluster's full state copied %d buckets, want at most %d", touched, cowGroup)
	}
	next := edit.done()
	for c := range 100 {
		for u := range 100 {
			want := c*1000 + u
			if c == 7 {
				want = -u
			}
			if v, ok := next.get(key(c, u)); !ok || v != want {
				t.Fatalf("get(%s) = %d, %v; want %d", key(c, u), v, ok, want)
			}
			if v, _ := base.get(key(c, u)); v != c*1000+u {
				t.Fatalf("the base changed: get(%s) = %d", key(c, u), v)
			}
		}
	}
	if _, ok := next.get("no-slash"); ok {
		t.Error("a missing key without a '/' was found")
	}
}
