package rpc

import (
	"container/list"
	"context"
	"path"
	"sync"
	"time"
)

// The client's metadata cache (Options.Cache; docs/design.md, "Client
// cache"). Stat answers from it while the lease under which the node that
// homes the path granted the inode lasts; the node notifies the client
// (Options.OnInvalidate is set to the cache's) before any change of the
// inode is applied, so a cached answer is never older than what a
// linearizable stat could return. On a miss, the cache may prefetch the
// paths a predictor expects next (PrefetchNexus) with the missed path, in
// one batched request per home.

// LevelCache is StatResponse.Level of an answer from the client's cache.
const LevelCache = "cache"

// Prefetch policies of CacheOptions.
const (
	// PrefetchNone caches what was read, least recently used out first.
	PrefetchNone = "none"
	// PrefetchNexus also fetches, on a miss, the strongest successors of
	// the missed path in a relationship graph of this client's accesses
	// (the Nexus paper, §4).
	PrefetchNexus = "nexus"
)

// CacheOptions configure the client's metadata cache.
type CacheOptions struct {
	// Entries bounds the cached inodes (default 10,000).
	Entries int
	// Prefetch is PrefetchNone (default) or PrefetchNexus.
	Prefetch string
	// Predictor predicts successors for PrefetchNexus; required with it
	// (package nexus provides one).
	Predictor Predictor
	// Group is the number of paths prefetched on a miss (default 2, the
	// paper's best in its simulation; Nexus §4.5.2). A group larger than
	// the predictor's successors of the missed path is filled by walking
	// its graph: the successors of the last path added, and so on.
	Group int
}

// Predictor learns a client's access sequence and predicts what follows
// an access (package nexus's relationship graph). It is called under the
// cache's lock.
type Predictor interface {
	// Access records an access to p.
	Access(p string)
	// Successors returns up to k paths expected after p, most likely
	// first.
	Successors(p string, k int) []string
}

// CacheStats count what the cache did.
type CacheStats struct {
	// Hits and Misses count stats answered from the cache and not.
	Hits, Misses uint64
	// Prefetched counts inodes fetched ahead of use; PrefetchUsed those
	// later hit, PrefetchWasted those dropped unused.
	Prefetched, PrefetchUsed, PrefetchWasted uint64
	// Invalidated counts entries dropped on a node's notice.
	Invalidated uint64
	// Entries is the number of inodes cached now.
	Entries int
}

// leaseMargin is the share of a lease the client does not use, so that a
// client whose clock runs up to this much slower than the node's still
// stops trusting an entry before the node stops honouring its lease.
const leaseMargin = 10

type cacheEntry struct {
	key        string
	st         StatResponse
	until      time.Time
	prefetched bool // fetched ahead and not used yet
	elem       *list.Element
}

// metaCache is the cache; Client.Stat uses it when set.
type metaCache struct {
	opts CacheOptions

	mu      sync.Mutex
	entries map[string]*cacheEntry
	lru     *list.List // front: most recently used
	gen     uint64     // invalidations so far
	stats   CacheStats
}

func newMetaCache(o CacheOptions) *metaCache {
	if o.Entries <= 0 {
		o.Entries = 10000
	}
	if o.Group <= 0 {
		o.Group = 2
	}
	if o.Prefetch == "" {
		o.Prefetch = PrefetchNone
	}
	return &metaCache{opts: o, entries: make(map[string]*cacheEntry), lru: list.New()}
}

// invalidate drops what inv names (Options.OnInvalidate).
func (m *metaCache) invalidate(inv *Invalidation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	for _, p := range inv.Paths {
		if e := m.entries[p]; e != nil {
			m.drop(e)
			m.stats.Invalidated++
		}
	}
	for _, q := range inv.Prefixes {
		for p, e := range m.entries {
			if p == q || q == "/" || (len(p) > len(q) && p[:len(q)] == q && p[len(q)] == '/') {
				m.drop(e)
				m.stats.Invalidated++
			}
		}
	}
}

// drop removes e; callers hold mu.
func (m *metaCache) drop(e *cacheEntry) {
	if e.prefetched {
		m.stats.PrefetchWasted++
	}
	m.lru.Remove(e.elem)
	delete(m.entries, e.key)
}

// lookup returns a copy of p's cached answer if its lease still holds.
func (m *metaCache) lookup(p string, now time.Time) (*StatResponse, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opts.Predictor != nil {
		m.opts.Predictor.Access(p)
	}
	e := m.entries[p]
	if e == nil || !now.Before(e.until) {
		if e != nil {
			m.drop(e)
		}
		m.stats.Misses++
		return nil, false
	}
	m.stats.Hits++
	if e.prefetched {
		e.prefetched = false
		m.stats.PrefetchUsed++
	}
	m.lru.MoveToFront(e.elem)
	st := e.st
	st.Level, st.Hops = LevelCache, 0
	return &st, true
}

// successors returns the prefetch group of a miss of p: up to Group
// paths found by walking the predictor's graph from p (the strongest
// successors of p, then those of the last path added, and so on; a
// group of at most the predictor's successors of p is the paper's),
// less those cached.
func (m *metaCache) successors(p string) []string {
	if m.opts.Prefetch != PrefetchNexus || m.opts.Predictor == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	seen := map[string]bool{p: true}
	for from, found := p, 0; found < m.opts.Group; {
		last := ""
		for _, q := range m.opts.Predictor.Successors(from, m.opts.Group-found) {
			if seen[q] {
				continue
			}
			seen[q], last = true, q
			found++
			if m.entries[q] == nil {
				out = append(out, q)
			}
		}
		if last == "" {
			break
		}
		from = last
	}
	return out
}

// install caches st under a lease granted on a request sent at sent,
// unless an invalidation arrived since gen was read.
func (m *metaCache) install(key string, st *StatResponse, sent time.Time, gen uint64, prefetched bool) {
	if st.Lease <= 0 {
		return
	}
	until := sent.Add(time.Duration(st.Lease - st.Lease/leaseMargin))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen {
		return // a write may have been applied after st was read
	}
	if e := m.entries[key]; e != nil {
		m.drop(e)
	}
	if prefetched {
		m.stats.Prefetched++
	}
	e := &cacheEntry{key: key, st: *st, until: until, prefetched: prefetched}
	e.elem = m.lru.PushFront(e)
	m.entries[key] = e
	for m.lru.Len() > m.opts.Entries {
		m.drop(m.lru.Back().Value.(*cacheEntry))
	}
}

// generation returns the invalidations so far.
func (m *metaCache) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

func (m *metaCache) snapshot() CacheStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Entries = len(m.entries)
	return s
}

// cacheKey is the key of path p: its clean form, or "" when p is not an
// absolute path (such a stat is not cached; the node refuses it).
func cacheKey(p string) string {
	if p == "" || p[0] != '/' {
		return ""
	}
	return path.Clean(p)
}

// cachedStat is Stat through the cache.
func (c *Client) cachedStat(ctx context.Context, p string) (*StatResponse, error) {
	m := c.cache
	key := cacheKey(p)
	if key == "" {
		return c.statOnce(ctx, p, false)
	}
	now := time.Now()
	if st, ok := m.lookup(key, now); ok {
		return st, nil
	}
	gen := m.generation()
	ahead := m.successors(key)
	if len(ahead) == 0 {
		st, err := c.statOnce(ctx, key, true)
		if err != nil {
			return nil, err
		}
		m.install(key, st, now, gen, false)
		return st, nil
	}
	// One request per home, concurrently: the group's paths on the
	// missed path's home travel with it, and the miss waits for the other
	// homes too, at most prefetchWait (fetching them in the background
	// after the answer instead made the client's next misses queue behind
	// them on a busy machine, and ended with fewer hits).
	home := c.homeOf(key)
	paths := []string{key}
	var others []string
	for _, q := range ahead {
		if c.homeOf(q) == home {
			paths = append(paths, q)
		} else {
			others = append(others, q)
		}
	}
	var prefetched *BatchStatResponse
	var wg sync.WaitGroup
	if len(others) > 0 {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, prefetchWait)
			defer cancel()
			prefetched, _ = c.batchStat(pctx, others, true, true)
		})
	}
	br, err := c.batchStat(ctx, paths, true, true)
	wg.Wait()
	if prefetched != nil {
		for i, r := range prefetched.Results {
			if r.Stat != nil {
				m.install(others[i], r.Stat, now, gen, true)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	for i, r := range br.Results {
		if r.Stat != nil {
			m.install(paths[i], r.Stat, now, gen, i > 0)
		}
	}
	first := br.Results[0]
	if err := first.Err(); err != nil {
		return nil, err
	}
	return first.Stat, nil
}

// prefetchWait bounds how long a miss waits for the part of its prefetch
// group homed elsewhere (a paused or distant home delays a miss no more).
const prefetchWait = 100 * time.Millisecond

// CacheStats returns the metadata cache's counters (zero without
// Options.Cache).
func (c *Client) CacheStats() CacheStats {
	if c.cache == nil {
		return CacheStats{}
	}
	return c.cache.snapshot()
}
