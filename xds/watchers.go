package xds

// watchers indexes the open watches of one set by the names they
// subscribe to, so that a change answers only the watches it concerns:
// a push must cost in proportion to the proxies that see the change, not
// to every connected proxy.
type watchers[W comparable] struct {
	wildcard map[W]struct{}
	byName   map[string]map[W]struct{}
	names    map[W][]string
}

func newWatchers[W comparable]() *watchers[W] {
	return &watchers[W]{wildcard: map[W]struct{}{}, byName: map[string]map[W]struct{}{}, names: map[W][]string{}}
}

func (ws *watchers[W]) add(w W, wildcard bool, subscribed map[string]struct{}) {
	if wildcard {
		ws.wildcard[w] = struct{}{}
		return
	}
	names := make([]string, 0, len(subscribed))
	for n := range subscribed {
		if ws.byName[n] == nil {
			ws.byName[n] = map[W]struct{}{}
		}
		ws.byName[n][w] = struct{}{}
		names = append(names, n)
	}
	ws.names[w] = names
}

func (ws *watchers[W]) empty() bool { return len(ws.wildcard) == 0 && len(ws.names) == 0 }

func (ws *watchers[W]) remove(w W) {
	delete(ws.wildcard, w)
	for _, n := range ws.names[w] {
		delete(ws.byName[n], w)
		if len(ws.byName[n]) == 0 {
			delete(ws.byName, n)
		}
	}
	delete(ws.names, w)
}

// affected returns the watches that subscribe to one of the changed names
// (or to everything); all returns every watch.
func (ws *watchers[W]) affected(changed []string, all bool) []W {
	out := make([]W, 0, len(ws.wildcard))
	for w := range ws.wildcard {
		out = append(out, w)
	}
	if all {
		for w := range ws.names {
			out = append(out, w)
		}
		return out
	}
	seen := map[W]struct{}{}
	for _, n := range changed {
		for w := range ws.byName[n] {
			if _, ok := seen[w]; !ok {
				seen[w] = struct{}{}
				out = append(out, w)
			}
		}
	}
	return out
}
