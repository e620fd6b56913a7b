package rpc

import "sync"

// homeCache maps paths to the RPC address of their home node, bounded to
// about max entries. It keeps two generations: lookups hit either, inserts
// go to the current one, and when the current one is full it becomes the
// old one (the previous old one is dropped). That is an approximate LRU
// with no per-entry bookkeeping. A stale entry only costs a hop: any node
// answers correctly, the home merely answers fastest.
type homeCache struct {
	mu       sync.Mutex
	max      int // per generation
	cur, old map[string]string
}

// newHomeCache returns a cache of about size entries, or nil (a no-op
// cache) if size is negative.
func newHomeCache(size int) *homeCache {
	if size < 0 {
		return nil
	}
	half := max(size/2, 1)
	return &homeCache{max: half, cur: make(map[string]string)}
}

// get returns the cached home address of path, or "".
func (h *homeCache) get(path string) string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.cur[path]; ok {
		return a
	}
	if a, ok := h.old[path]; ok {
		delete(h.old, path)
		h.putLocked(path, a) // promote
		return a
	}
	return ""
}

// put records path's home address; an empty addr removes the entry.
func (h *homeCache) put(path, addr string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if addr == "" {
		delete(h.cur, path)
		delete(h.old, path)
		return
	}
	h.putLocked(path, addr)
}

func (h *homeCache) putLocked(path, addr string) {
	if _, ok := h.cur[path]; !ok && len(h.cur) >= h.max {
		h.old = h.cur
		h.cur = make(map[string]string, h.max)
	}
	h.cur[path] = addr
}

// forget removes path.
func (h *homeCache) forget(path string) { h.put(path, "") }
