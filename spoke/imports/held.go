package imports

import (
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/federation/federationpb"
)

// Held is what the cluster holds of the imports, as the writer last saw
// it: the ServiceImports it wrote, and the imports it holds none of
// because the cluster has no namespace of theirs. Every link reports it
// to its replica. It is safe for concurrent use.
type Held struct {
	mu      sync.Mutex
	cur     map[string]*federationpb.HeldImport
	synced  bool
	cursors map[*heldCursor]struct{}
}

func newHeld() *Held {
	return &Held{cur: map[string]*federationpb.HeldImport{}, cursors: map[*heldCursor]struct{}{}}
}

// Set records what the cluster holds of one import. h is not modified
// afterwards by the caller.
func (h *Held) Set(im *federationpb.HeldImport) {
	key := federation.ServiceKey(im.GetNamespace(), im.GetName())
	h.mu.Lock()
	defer h.mu.Unlock()
	if proto.Equal(h.cur[key], im) {
		return
	}
	h.cur[key] = im
	h.dirtyLocked(key)
}

// Delete records that the cluster holds nothing of an import.
func (h *Held) Delete(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.cur[key]; !ok {
		return
	}
	delete(h.cur, key)
	h.dirtyLocked(key)
}

// Synced records that the writer has listed the cluster: what Held holds
// is the cluster's, and links may report it.
func (h *Held) Synced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.synced {
		return
	}
	h.synced = true
	for c := range h.cursors {
		c.full = true
		c.signal()
	}
}

// Get returns what the cluster holds of one import.
func (h *Held) Get(key string) (*federationpb.HeldImport, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	im, ok := h.cur[key]
	return im, ok
}

func (h *Held) dirtyLocked(key string) {
	for c := range h.cursors {
		if c.dirty == nil {
			c.dirty = map[string]struct{}{}
		}
		c.dirty[key] = struct{}{}
		if h.synced {
			c.signal()
		}
	}
}

func (h *Held) subscribe() *heldCursor {
	c := &heldCursor{h: h, changed: make(chan struct{}, 1), full: true}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cursors[c] = struct{}{}
	return c
}

func (h *Held) unsubscribe(c *heldCursor) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.cursors, c)
}

// heldCursor is what one link has still to report. Guarded by Held.mu.
type heldCursor struct {
	h       *Held
	changed chan struct{}
	full    bool
	dirty   map[string]struct{}
}

func (c *heldCursor) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// restart makes the next report full: a new stream.
func (c *heldCursor) restart() {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.full, c.dirty = true, nil
	if c.h.synced {
		c.signal()
	}
}

// reportOverhead is the bytes a report's chunk may take beyond its
// entries (tags, lengths, flags).
const reportOverhead = 64

// next returns the next report in chunks below maxBytes, or nil.
func (c *heldCursor) next(maxBytes int) []*federationpb.ImportsHeld {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.synced || (!c.full && len(c.dirty) == 0) {
		return nil
	}
	full := c.full
	var keys []string
	if full {
		keys = make([]string, 0, len(h.cur))
		for k := range h.cur {
			keys = append(keys, k)
		}
	} else {
		keys = make([]string, 0, len(c.dirty))
		for k := range c.dirty {
			keys = append(keys, k)
		}
	}
	c.full, c.dirty = false, nil
	slices.Sort(keys)

	budget := max(maxBytes-reportOverhead, 1)
	var out []*federationpb.ImportsHeld
	chunk := &federationpb.ImportsHeld{Full: full}
	size := 0
	for _, k := range keys {
		im, ok := h.cur[k]
		var n int
		if ok {
			n = proto.Size(im) + 8
		} else {
			n = len(k) + 8
		}
		if size > 0 && size+n > budget {
			chunk.More = true
			out = append(out, chunk)
			chunk, size = &federationpb.ImportsHeld{Full: full}, 0
		}
		if ok {
			chunk.Imports = append(chunk.Imports, im)
		} else {
			chunk.Removed = append(chunk.Removed, k)
		}
		size += n
	}
	return append(out, chunk)
}
