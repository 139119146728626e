package registry

import (
	"fmt"
	"testing"
)

func TestCowMap(t *testing.T) {
	base := newCowMap[int](serviceBuckets)
	e := newCowEdit(&base)
	for i := range 1000 {
		e.set(fmt.Sprint(i), i)
	}
	a := e.done()
	e2 := newCowEdit(&a)
	e2.set("0", -1)
	e2.delete("1")
	e2.delete("missing")
	b := e2.done()
	if v, _ := a.get("0"); v != 0 || a.len != 1000 {
		t.Errorf("the base map changed: %d, len %d", v, a.len)
	}
	if v, _ := b.get("0"); v != -1 || b.len != 999 {
		t.Errorf("edited map: %d, len %d", v, b.len)
	}
	if _, ok := b.get("1"); ok {
		t.Error("deleted key still present")
	}
	touched := 0
	for _, owned := range e2.owned {
		if owned {
			touched++
		}
	}
	if touched > 2 {
		t.Errorf("two keys' changes copied %d buckets", touched)
	}
	var zero cowMap[int]
	if _, ok := zero.get("0"); ok || zero.len != 0 {
		t.Error("the zero map is not empty")
	}
}
