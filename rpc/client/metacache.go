package client

import (
	"container/list"
	"context"
	"path"
	"sync"
	"time"

	"github.com/ghba/ghba/rpc"
)

// The client's metadata cache (Options.Cache; docs/design.md, "Client
// cache"). Stat answers from it while the lease under which the node that
// homes the path granted the inode lasts; the node notifies the client
// (Options.OnInvalidate is set to the cache's) before any change of the
// inode is applied, so a cached answer is never older than what a
// linearizable stat could return. A path that does not exist is cached
// too, under a lease on its absence (rpc.BatchStatResult.Lease), which the
// node revokes before the name is created. On a miss, the cache may
// prefetch the paths a predictor expects next (PrefetchNexus) with the
// missed path, in one batched request per home.

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
	// Entries bounds the cached inodes and absences (default 10,000).
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
	// PrefetchTimeout bounds a background prefetch (the part of a group
	// homed elsewhere than the missed path, or a listing's entries;
	// default 100 ms): the stats waiting for one of its paths wait no
	// longer than that.
	PrefetchTimeout time.Duration
	// ListPrefetch, when above 0, makes each ReadDir page through this
	// client fetch up to that many of the page's entries that are not
	// cached, in the background and under leases, as a prefetch group is
	// fetched (what NFS's READDIRPLUS and FUSE's readdirplus do): a
	// program that lists a directory and then stats its entries finds
	// them cached the first time, before any predictor has seen them.
	// 0 (the default) fetches none.
	ListPrefetch int
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
	key string
	st  rpc.StatResponse
	// absent, when not nil, is the answer instead of st: the path does
	// not exist (an error with rpc.CodeNotExist and the node's message).
	absent     error
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
	// inflight holds the paths a background prefetch is fetching: done is
	// closed when its answers are installed (or it failed).
	inflight map[string]chan struct{}
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
	if o.PrefetchTimeout <= 0 {
		o.PrefetchTimeout = defaultPrefetchTimeout
	}
	return &metaCache{opts: o, entries: make(map[string]*cacheEntry), lru: list.New(), inflight: make(map[string]chan struct{})}
}

// invalidate drops what inv names (Options.OnInvalidate).
func (m *metaCache) invalidate(inv *rpc.Invalidation) {
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

// forget drops the entries of keys without counting an invalidation:
// the client itself changed what they describe. Unlike invalidate it
// leaves answers in flight free to be installed, so that a process which
// creates files in a directory does not waste the prefetches it has in
// flight elsewhere (an answer for one of keys sent before the change is
// the window this leaves).
func (m *metaCache) forget(keys []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if e := m.entries[k]; e != nil {
			m.drop(e)
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

// lookup returns p's cached answer if its lease still holds (a copy of
// the inode, or the error saying p does not exist), recording the access
// with the predictor. On a miss (hit false), wait is non-nil if a
// background prefetch is fetching p: after it is closed, p may be cached
// (lookupAfterWait).
func (m *metaCache) lookup(p string, now time.Time) (st *rpc.StatResponse, hit bool, wait <-chan struct{}, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opts.Predictor != nil {
		m.opts.Predictor.Access(p)
	}
	if st, hit, err := m.hitLocked(p, now); hit {
		return st, true, nil, err
	}
	if w := m.inflight[p]; w != nil {
		return nil, false, w, nil
	}
	m.stats.Misses++
	return nil, false, nil, nil
}

// lookupAfterWait is lookup's second look at p once the prefetch it
// waited for ended: a hit, or a miss counted now.
func (m *metaCache) lookupAfterWait(p string, now time.Time) (st *rpc.StatResponse, hit bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, hit, err = m.hitLocked(p, now)
	if !hit {
		m.stats.Misses++
	}
	return st, hit, err
}

// hitLocked returns p's answer (a copy of its inode, or the error saying
// it does not exist) and counts a hit, or drops an expired entry and
// returns hit false; callers hold mu.
func (m *metaCache) hitLocked(p string, now time.Time) (st *rpc.StatResponse, hit bool, err error) {
	e := m.entries[p]
	if e == nil || !now.Before(e.until) {
		if e != nil {
			m.drop(e)
		}
		return nil, false, nil
	}
	m.stats.Hits++
	if e.prefetched {
		e.prefetched = false
		m.stats.PrefetchUsed++
	}
	m.lru.MoveToFront(e.elem)
	if e.absent != nil {
		return nil, true, e.absent
	}
	c := e.st
	c.Level, c.Hops = rpc.LevelCache, 0
	return &c, true, nil
}

// successors returns the prefetch group of a miss of p: up to Group
// paths found by walking the predictor's graph from p (the strongest
// successors of p, then those of the last path added, and so on; a
// group of at most the predictor's successors of p is the paper's),
// less those cached under a lease that still holds and those a prefetch
// is fetching.
func (m *metaCache) successors(p string) []string {
	if m.opts.Prefetch != PrefetchNexus || m.opts.Predictor == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	now := time.Now()
	seen := map[string]bool{p: true}
	for from, found := p, 0; found < m.opts.Group; {
		last := ""
		for _, q := range m.opts.Predictor.Successors(from, m.opts.Group-found) {
			if seen[q] {
				continue
			}
			seen[q], last = true, q
			found++
			if m.wantedLocked(q, now) {
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

// wantedLocked reports whether q is worth fetching ahead: not cached under
// a lease that still holds, and not in flight; callers hold mu.
func (m *metaCache) wantedLocked(q string, now time.Time) bool {
	e := m.entries[q]
	return (e == nil || !now.Before(e.until)) && m.inflight[q] == nil
}

// listed returns the entries of directory dir (its cacheKey; a ReadDir
// page) that ListPrefetch fetches: the first ListPrefetch of them that are
// wanted.
func (m *metaCache) listed(dir string, entries []rpc.DirEntry) []string {
	if m.opts.ListPrefetch <= 0 || dir == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []string
	for _, e := range entries {
		if len(out) == m.opts.ListPrefetch {
			break
		}
		if q := path.Join(dir, e.Name); m.wantedLocked(q, now) {
			out = append(out, q)
		}
	}
	return out
}

// install caches r, an answer for key (an inode, or the error saying key
// does not exist), under the lease granted on a request sent at sent,
// unless an invalidation arrived since gen was read.
func (m *metaCache) install(key string, r *rpc.BatchStatResult, sent time.Time, gen uint64, prefetched bool) {
	var (
		lease  int64
		absent error
	)
	switch {
	case r.Stat != nil:
		lease = r.Stat.Lease
	case r.Code == rpc.CodeNotExist:
		lease, absent = r.Lease, r.Err()
	}
	if lease <= 0 {
		return
	}
	until := sent.Add(time.Duration(lease - lease/leaseMargin))
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
	e := &cacheEntry{key: key, absent: absent, until: until, prefetched: prefetched}
	if r.Stat != nil {
		e.st = *r.Stat
	}
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
func (c *Client) cachedStat(ctx context.Context, p string) (*rpc.StatResponse, error) {
	m := c.cache
	key := cacheKey(p)
	if key == "" {
		return c.statOnce(ctx, p, false)
	}
	now := time.Now()
	st, hit, wait, err := m.lookup(key, now)
	if hit {
		return st, err
	}
	if wait != nil { // a prefetch is bringing it: cheaper than asking again
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		now = time.Now()
		if st, hit, err := m.lookupAfterWait(key, now); hit {
			return st, err
		}
	}
	gen := m.generation()
	ahead := m.successors(key)
	// The group's paths on the missed path's home travel with it; those
	// homed elsewhere go at the same time, one request per home, in the
	// background: the miss does not wait for them, and a stat of one of
	// them while it is in flight waits for its answer instead of asking
	// again (waiting for every home made a miss as slow as the slowest
	// home; fetching the others only after the answer made the next
	// accesses miss).
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
	if len(others) > 0 {
		c.prefetch(others, now, gen)
	}
	// A lone path goes as a batch of one too: a batch's answer can carry
	// a lease on a path's absence.
	br, err := c.batchStat(ctx, paths, true, len(paths) > 1)
	if err != nil {
		return nil, err
	}
	for i := range br.Results {
		m.install(paths[i], &br.Results[i], now, gen, i > 0)
	}
	first := br.Results[0]
	if err := first.Err(); err != nil {
		return nil, err
	}
	return first.Stat, nil
}

// prefetch fetches paths in the background (one request per home) and
// caches the answers under leases counted from sent, unless an
// invalidation arrived since gen was read. The paths are in flight until
// then: a stat of one of them waits for the answer (cachedStat). It gives
// up after CacheOptions.PrefetchTimeout; Close stops it.
func (c *Client) prefetch(paths []string, sent time.Time, gen uint64) {
	m := c.cache
	done := make(chan struct{})
	m.mu.Lock()
	for _, q := range paths {
		m.inflight[q] = done
	}
	m.mu.Unlock()
	finish := func() {
		m.mu.Lock()
		for _, q := range paths {
			if m.inflight[q] == done {
				delete(m.inflight, q)
			}
		}
		m.mu.Unlock()
		close(done)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		finish()
		return
	}
	c.prefetches.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.prefetches.Done()
		defer finish()
		// Close fails the call (it closes the connections, then waits for
		// c.prefetches).
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.PrefetchTimeout)
		defer cancel()
		br, _ := c.batchStat(ctx, paths, true, true)
		if br == nil {
			return
		}
		for i := range br.Results {
			m.install(paths[i], &br.Results[i], sent, gen, true)
		}
	}()
}

// defaultPrefetchTimeout is CacheOptions.PrefetchTimeout's default.
const defaultPrefetchTimeout = 100 * time.Millisecond

// CacheStats returns the metadata cache's counters (zero without
// Options.Cache).
func (c *Client) CacheStats() CacheStats {
	if c.cache == nil {
		return CacheStats{}
	}
	return c.cache.snapshot()
}

// CachedUntil returns until when the metadata cache holds p's answer (its
// inode, or its absence) under a lease, with the client's safety margin
// taken off; the zero time when it holds none. Until then the node that
// granted the lease notifies the client (Options.OnInvalidate) before p
// changes: a cache of its own above this client (the kernel's, for a
// mount) may keep the answer that long.
func (c *Client) CachedUntil(p string) time.Time {
	if c.cache == nil {
		return time.Time{}
	}
	key := cacheKey(p)
	m := c.cache
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[key]; e != nil && time.Now().Before(e.until) {
		return e.until
	}
	return time.Time{}
}
