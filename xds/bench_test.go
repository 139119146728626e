package xds

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/meshfed/meshfed/xds/resources"
	"github.com/meshfed/meshfed/xds/translate"
)

// BenchmarkCacheApplyViews is one endpoint change as a push applies it at
// fleet scale: the changed service's assignment goes to every EDS view, each
// of which holds every service's. Each view has a proxy watching a few
// names, none of them the changed one. A view's cost is paid once per change
// per view, so it bounds how many zones a hub can serve.
func BenchmarkCacheApplyViews(b *testing.B) {
	const views, names = 1000, 10000
	c := NewCache()
	all := make([]*entry, names)
	for i := range all {
		all[i] = translate.NewResource(resources.EndpointType, fmt.Sprintf("outbound|8080||svc-%d.ns.svc.cluster.local", i), []byte{byte(i), byte(i >> 8)})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keys := make([]string, views)
	for v := range keys {
		keys[v] = fmt.Sprintf("net/region/zone-%d/", v)
		c.Apply(translate.SetUpdate{TypeURL: resources.EndpointType, View: keys[v], Upserts: all})
		w := &sotwWatch{typeURL: resources.EndpointType, sub: &sotwSubscription{names: map[string]struct{}{all[v%names].Name: {}}}, ch: make(chan *response, 1)}
		c.watchSotw(keys[v], w)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// A change reaches every view, in one of a few encodings (views
		// that rank the service's localities alike share one).
		name := all[(i*7919)%names].Name
		var encoded [3]*entry
		for j := range encoded {
			encoded[j] = translate.NewResource(resources.EndpointType, name, []byte{byte(i), byte(i >> 8), byte(j)})
		}
		for v, k := range keys {
			c.Apply(translate.SetUpdate{TypeURL: resources.EndpointType, View: k, Upserts: []*entry{encoded[v%len(encoded)]}})
		}
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/views, "heap-B/view")
}

// BenchmarkCacheBuildView is a view's first build as a proxy of a new zone
// brings it (or a restart, for every zone at once): a set of 10,000 names
// made, then dropped.
func BenchmarkCacheBuildView(b *testing.B) {
	all := make([]*entry, 10000)
	for i := range all {
		all[i] = translate.NewResource(resources.EndpointType, fmt.Sprintf("outbound|8080||svc-%d.ns.svc.cluster.local", i), []byte{byte(i), byte(i >> 8)})
	}
	c := NewCache()
	b.ReportAllocs()
	for i := range b.N {
		view := strconv.Itoa(i)
		c.Apply(translate.SetUpdate{TypeURL: resources.EndpointType, View: view, Upserts: all})
		c.Apply(translate.SetUpdate{TypeURL: resources.EndpointType, View: view, Drop: true})
	}
}
