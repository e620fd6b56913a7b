package cachesim

// cache is one client's metadata cache under a replacement policy. Its
// entries are ids ≥ 0 (client-local path ids for client caches, global
// path ids for the server cache), looked up in a dense slot slice: no map
// in the per-access path.
type cache interface {
	// demand is an access to p (global path id g) whose next use (for
	// OPT) is next: it reports a hit, and on a miss inserts p (OPT may
	// bypass it).
	demand(p, g int32, next int64) bool
	// prefetch inserts p (global id g) as a prefetched, not yet used entry
	// right behind the most recent demand entry; it reports whether p was
	// inserted (false when present or when the cache holds a single
	// entry).
	prefetch(p, g int32) bool
	// remove drops p (invalidation or deletion) and reports whether it was
	// present.
	remove(p int32) bool
	has(p int32) bool
}

// prefetchCounts tallies what became of prefetched entries.
type prefetchCounts struct {
	used, wasted int64
}

// lruCache is an LRU list of at most capacity entries (node 0 is the
// sentinel; head = most recent). With mru set it evicts the most recently
// used entry instead (MRU). It tracks prefetched entries: used when a
// demand access hits them, wasted when evicted or removed unused.
type lruCache struct {
	capacity   int
	mru        bool
	size       int
	slot       []int32 // id → node, 0: absent
	path       []int32 // node → id
	prev, next []int32
	pref       []bool
	free       []int32
	counts     *prefetchCounts
	glob       []int32 // node → global path id
	held       []int32 // global id → copies in the caches sharing it; nil: not counted
}

func newLRU(capacity int, mru bool, counts *prefetchCounts, held []int32) *lruCache {
	c := &lruCache{capacity: max(1, capacity), mru: mru, counts: counts, held: held}
	c.path, c.prev, c.next, c.pref, c.glob = []int32{-1}, []int32{0}, []int32{0}, []bool{false}, []int32{-1}
	return c
}

// node returns p's node, 0 when absent.
func (c *lruCache) node(p int32) int32 {
	if int(p) < len(c.slot) {
		return c.slot[p]
	}
	return 0
}

func (c *lruCache) has(p int32) bool { return c.node(p) != 0 }

func (c *lruCache) unlink(n int32) {
	c.next[c.prev[n]] = c.next[n]
	c.prev[c.next[n]] = c.prev[n]
}

// linkAfter puts n right after node at.
func (c *lruCache) linkAfter(n, at int32) {
	c.prev[n], c.next[n] = at, c.next[at]
	c.prev[c.next[at]] = n
	c.next[at] = n
}

// drop removes node n, counting a wasted prefetch.
func (c *lruCache) drop(n int32) {
	if c.pref[n] {
		c.counts.wasted++
		c.pref[n] = false
	}
	c.unlink(n)
	c.slot[c.path[n]] = 0
	if c.held != nil {
		c.held[c.glob[n]]--
	}
	c.size--
	c.free = append(c.free, n)
}

func (c *lruCache) alloc(p, g int32) int32 {
	var n int32
	if k := len(c.free); k > 0 {
		n = c.free[k-1]
		c.free = c.free[:k-1]
	} else {
		n = int32(len(c.path))
		c.path = append(c.path, 0)
		c.prev = append(c.prev, 0)
		c.next = append(c.next, 0)
		c.pref = append(c.pref, false)
		c.glob = append(c.glob, 0)
	}
	c.path[n], c.glob[n] = p, g
	if c.held != nil {
		c.held[g]++
	}
	c.slot = grow(c.slot, p)
	c.slot[p] = n
	c.size++
	return n
}

func (c *lruCache) demand(p, g int32, _ int64) bool {
	if n := c.node(p); n != 0 {
		if c.pref[n] {
			c.counts.used++
			c.pref[n] = false
		}
		c.unlink(n)
		c.linkAfter(n, 0)
		return true
	}
	if c.size >= c.capacity {
		if c.mru {
			c.drop(c.next[0])
		} else {
			c.drop(c.prev[0])
		}
	}
	c.linkAfter(c.alloc(p, g), 0)
	return false
}

func (c *lruCache) prefetch(p, g int32) bool {
	if c.capacity < 2 || c.has(p) {
		return false
	}
	if c.size >= c.capacity {
		c.drop(c.prev[0]) // the LRU end, never the head just demanded
	}
	n := c.alloc(p, g)
	c.pref[n] = true
	c.linkAfter(n, c.next[0])
	return true
}

func (c *lruCache) remove(p int32) bool {
	n := c.node(p)
	if n != 0 {
		c.drop(n)
	}
	return n != 0
}

// grow extends s so that s[i] exists.
func grow(s []int32, i int32) []int32 {
	if int(i) < len(s) {
		return s
	}
	n := max(int(i)+1, 2*len(s), 16)
	if n <= cap(s) {
		return s[:n]
	}
	ns := make([]int32, n)
	copy(ns, s)
	return ns
}

// heapCache is a cache whose victim is the minimum of a key: LFU (key =
// frequency, then last access: the least frequently used, least recently
// among equals) or OPT (key = −next use: the entry used farthest in the
// future, Belady's MIN).
type heapCache struct {
	capacity int
	opt      bool
	seq      int64
	pos      []int32 // id → index in keys/paths + 1, 0: absent
	keys     []int64
	paths    []int32
	freq     []int64 // LFU: access count of each heap slot
	glob     []int32 // global path id of each heap slot
	held     []int32 // global id → copies in the caches sharing it; nil: not counted
}

func newLFU(capacity int, held []int32) *heapCache {
	return &heapCache{capacity: max(1, capacity), held: held}
}

func newOPT(capacity int, held []int32) *heapCache {
	return &heapCache{capacity: max(1, capacity), opt: true, held: held}
}

// at returns p's heap index, −1 when absent.
func (h *heapCache) at(p int32) int {
	if int(p) < len(h.pos) {
		return int(h.pos[p]) - 1
	}
	return -1
}

func (h *heapCache) setPos(p int32, i int) {
	h.pos = grow(h.pos, p)
	h.pos[p] = int32(i + 1)
}

func (h *heapCache) has(p int32) bool { return h.at(p) >= 0 }

// key of an entry with access count f at time seq (LFU) or next use next
// (OPT).
func (h *heapCache) key(f, seq, next int64) int64 {
	if h.opt {
		return -next
	}
	return f<<40 | seq // f < 2^23, seq < 2^40
}

func (h *heapCache) demand(p, g int32, next int64) bool {
	h.seq++
	if i := h.at(p); i >= 0 {
		h.freq[i]++
		h.keys[i] = h.key(h.freq[i], h.seq, next)
		h.fix(i)
		return true
	}
	k := h.key(1, h.seq, next)
	if len(h.keys) >= h.capacity {
		if h.opt && k <= h.keys[0] {
			return false // used no sooner than every entry: MIN bypasses it
		}
		h.removeAt(0)
	}
	h.keys = append(h.keys, k)
	h.paths = append(h.paths, p)
	h.freq = append(h.freq, 1)
	h.glob = append(h.glob, g)
	if h.held != nil {
		h.held[g]++
	}
	i := len(h.keys) - 1
	h.setPos(p, i)
	h.up(i)
	return false
}

func (h *heapCache) prefetch(int32, int32) bool { return false }

func (h *heapCache) remove(p int32) bool {
	i := h.at(p)
	if i >= 0 {
		h.removeAt(i)
	}
	return i >= 0
}

func (h *heapCache) removeAt(i int) {
	last := len(h.keys) - 1
	h.pos[h.paths[i]] = 0
	if h.held != nil {
		h.held[h.glob[i]]--
	}
	if i != last {
		h.keys[i], h.paths[i], h.freq[i], h.glob[i] = h.keys[last], h.paths[last], h.freq[last], h.glob[last]
		h.setPos(h.paths[i], i)
	}
	h.keys, h.paths, h.freq, h.glob = h.keys[:last], h.paths[:last], h.freq[:last], h.glob[:last]
	if i != last {
		h.fix(i)
	}
}

func (h *heapCache) swap(i, j int) {
	h.keys[i], h.keys[j] = h.keys[j], h.keys[i]
	h.paths[i], h.paths[j] = h.paths[j], h.paths[i]
	h.freq[i], h.freq[j] = h.freq[j], h.freq[i]
	h.glob[i], h.glob[j] = h.glob[j], h.glob[i]
	h.pos[h.paths[i]] = int32(i + 1)
	h.pos[h.paths[j]] = int32(j + 1)
}

func (h *heapCache) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if h.keys[p] <= h.keys[i] {
			break
		}
		h.swap(i, p)
		i = p
		moved = true
	}
	return moved
}

func (h *heapCache) fix(i int) {
	if h.up(i) {
		return
	}
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h.keys) && h.keys[l] < h.keys[m] {
			m = l
		}
		if r < len(h.keys) && h.keys[r] < h.keys[m] {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}
