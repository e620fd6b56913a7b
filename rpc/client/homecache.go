package client

import (
	"path"
	"sync"
)

// homeCache maps paths to the RPC address of their home node, bounded to
// about max entries, by directory: most files live in their directory's
// shard (placement colocate), so the cache keeps, per directory, the home
// of the files seen in it, and an entry for a path only when its home
// differs from that. A sweep over many more files than the cache holds
// then still finds their homes, one entry per directory.
//
// It keeps two generations: lookups hit either, inserts go to the current
// one, and when the current one is full it becomes the old one (the
// previous old one is dropped). That is an approximate LRU with no
// per-entry bookkeeping. A stale entry only costs a hop: any node answers
// correctly, the home merely answers fastest.
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

// filesKey is the key of the home of the files of directory dir (a path
// never starts with a NUL byte).
func filesKey(dir string) string { return "\x00" + dir }

// get returns the cached home address of p: its own entry, else its
// directory's files' home, else its directory's own home (where placement
// colocate puts the directory's files, so the first file seen in a
// directory already goes to the right node); "" when none is known.
func (h *homeCache) get(p string) string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.getLocked(p); a != "" {
		return a
	}
	dir := path.Dir(p)
	if a := h.getLocked(filesKey(dir)); a != "" {
		return a
	}
	if dir == p { // "/"
		return ""
	}
	return h.getLocked(dir)
}

// getDir returns the cached home address of directory dir, where its
// entries are changed: the home of its files if known (they live with
// it), else as get.
func (h *homeCache) getDir(dir string) string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	a := h.getLocked(filesKey(dir))
	h.mu.Unlock()
	if a != "" {
		return a
	}
	return h.get(dir)
}

func (h *homeCache) getLocked(key string) string {
	if a, ok := h.cur[key]; ok {
		return a
	}
	if a, ok := h.old[key]; ok {
		delete(h.old, key)
		h.putLocked(key, a) // promote
		return a
	}
	return ""
}

// put records the home address of p, a directory when isDir; an empty
// addr forgets p (and its directory's files' home, which may be what sent
// a request astray). A directory's home says nothing of where its
// siblings live (placement colocate spreads directories), so it never
// becomes its parent's files' home.
func (h *homeCache) put(p, addr string, isDir bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	dir := filesKey(path.Dir(p))
	if addr == "" {
		for _, k := range []string{p, dir} {
			delete(h.cur, k)
			delete(h.old, k)
		}
		return
	}
	switch h.getLocked(dir) {
	case addr: // with its directory's files: no entry of its own
		delete(h.cur, p)
		delete(h.old, p)
	case "":
		if isDir {
			h.putLocked(p, addr)
		} else {
			h.putLocked(dir, addr)
		}
	default:
		h.putLocked(p, addr)
	}
}

func (h *homeCache) putLocked(key, addr string) {
	if _, ok := h.cur[key]; !ok && len(h.cur) >= h.max {
		h.old = h.cur
		h.cur = make(map[string]string, h.max)
	}
	h.cur[key] = addr
}

// forget removes p.
func (h *homeCache) forget(p string) { h.put(p, "", false) }
