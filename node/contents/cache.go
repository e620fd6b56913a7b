package contents

import (
	"context"
	"errors"
	"io"
	"sync"
)

// maxFree is how many unused buffers of one size a bufPool keeps.
const maxFree = 16

// bufPool recycles block buffers: a bounded free list per buffer size.
// Unlike a sync.Pool it survives garbage collections: a 4 MiB buffer
// allocated afresh costs page faults and zeroing, which a streaming read
// or write would otherwise pay again after every collection.
type bufPool struct {
	mu   sync.Mutex
	free map[int][]*[]byte
}

// get returns a buffer of n bytes with arbitrary contents.
func (p *bufPool) get(n int) *[]byte {
	p.mu.Lock()
	if l := p.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[n] = l[:len(l)-1]
		p.mu.Unlock()
		return b
	}
	p.mu.Unlock()
	b := make([]byte, n)
	return &b
}

// minPooled is the smallest buffer a bufPool keeps: the short copies the
// block cache makes of small objects (shrink) go to the garbage collector.
const minPooled = 64 << 10

// put recycles b; the caller keeps no reference to it.
func (p *bufPool) put(b *[]byte) {
	n := cap(*b)
	if n < minPooled {
		return
	}
	*b = (*b)[:n]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = make(map[int][]*[]byte)
	}
	if len(p.free[n]) < maxFree {
		p.free[n] = append(p.free[n], b)
	}
}

// cacheKey names one object: objects are immutable, so a cached copy is
// never stale.
type cacheKey struct {
	s          *Store
	ino, block uint64
	gen        uint64
}

// cacheEntry is one cached object, or one being loaded.
type cacheEntry struct {
	key  cacheKey
	buf  *[]byte       // from pool; nil once recycled
	n    int           // the object's length
	err  error         // the load's error
	done chan struct{} // closed when the load is over; nil for entries put whole

	// Guarded by BlockCache.mu.
	refs       int  // readers holding the entry
	dead       bool // out of the map: recycle buf when refs drops to 0
	prev, next *cacheEntry
}

// data returns the object's bytes; valid while the caller holds a reference.
func (e *cacheEntry) data() []byte { return (*e.buf)[:e.n] }

// entryOverhead is what the cache counts for an entry besides its buffer
// (the entry, its map slot): a cache of many small objects stays bounded.
const entryOverhead = 256

// cost is what buf counts against the cache's bound.
func cost(buf *[]byte) int64 { return int64(cap(*buf)) + entryOverhead }

// shrink returns a buffer of exactly n bytes holding the first n of buf,
// and recycles buf into pool, when n is at most an eighth of buf's size
// (a small file's object in a block-sized buffer); else buf itself. The
// cache then holds thousands of small files in the memory of a few blocks.
func shrink(pool *bufPool, buf *[]byte, n int) *[]byte {
	if n > cap(*buf)/8 {
		return buf
	}
	b := make([]byte, n)
	copy(b, (*buf)[:n])
	pool.put(buf)
	return &b
}

// BlockCache is a cache of clean blocks (whole objects) bounded in bytes,
// shared by the files of one or more stores; least recently used objects go
// first. Loads of one object are shared: a reader of an object being read
// ahead waits for that load instead of starting another. Objects held by a
// reader while evicted are recycled when released, so the bound can be
// passed for as long as readers copy out of evicted blocks.
type BlockCache struct {
	mu    sync.Mutex
	limit int64
	used  int64
	m     map[cacheKey]*cacheEntry
	lru   cacheEntry // sentinel: lru.next is the most recently used
}

// NewBlockCache returns a cache that holds at most limit bytes of blocks
// (at least one block is held while in use whatever the limit).
func NewBlockCache(limit int64) *BlockCache {
	c := &BlockCache{limit: limit, m: make(map[cacheKey]*cacheEntry)}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// Used returns the bytes of blocks the cache holds.
func (c *BlockCache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

func (c *BlockCache) unlinkLocked(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *BlockCache) pushFrontLocked(e *cacheEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

// removeLocked takes e out of the cache; its buffer is recycled at once or
// when its last reader releases it.
func (c *BlockCache) removeLocked(e *cacheEntry) {
	if e.dead {
		return
	}
	e.dead = true
	delete(c.m, e.key)
	c.unlinkLocked(e)
	c.used -= cost(e.buf)
	if e.refs == 0 {
		c.recycleLocked(e)
	}
}

func (c *BlockCache) recycleLocked(e *cacheEntry) {
	if e.buf != nil {
		e.key.s.pool.put(e.buf)
		e.buf = nil
	}
}

// evictLocked removes least recently used entries until the cache fits its
// bound, sparing keep.
func (c *BlockCache) evictLocked(keep *cacheEntry) {
	for e := c.lru.prev; c.used > c.limit && e != &c.lru; {
		prev := e.prev
		if e != keep {
			c.removeLocked(e)
		}
		e = prev
	}
}

// lookup returns the loaded entry of k with a reference, or nil.
func (c *BlockCache) lookup(k cacheKey) *cacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[k]
	if e == nil || (e.done != nil && !closed(e.done)) {
		return nil
	}
	e.refs++
	c.unlinkLocked(e)
	c.pushFrontLocked(e)
	return e
}

// has reports whether k is cached or being loaded.
func (c *BlockCache) has(k cacheKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k] != nil
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// release drops a reference lookup, get or put returned.
func (c *BlockCache) release(e *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.dead {
		c.recycleLocked(e)
	}
}

// get returns the entry of k, loading the whole object (at most bs bytes)
// from the store when missing; the caller releases it. A load that another
// caller started is waited for.
func (c *BlockCache) get(ctx context.Context, k cacheKey, bs int64) (*cacheEntry, error) {
	for {
		c.mu.Lock()
		if e := c.m[k]; e != nil {
			e.refs++
			c.unlinkLocked(e)
			c.pushFrontLocked(e)
			c.mu.Unlock()
			if e.done != nil {
				select {
				case <-e.done:
				case <-ctx.Done():
					c.release(e)
					return nil, ctx.Err()
				}
			}
			if e.err != nil {
				err := e.err
				c.release(e)
				if isCtxErr(err) && ctx.Err() == nil {
					continue // the loader gave up; load for ourselves
				}
				return nil, err
			}
			return e, nil
		}
		// Make room first, so that the evicted buffer is the one reused.
		c.used += bs + entryOverhead
		c.evictLocked(nil)
		c.used -= bs + entryOverhead
		e := &cacheEntry{key: k, done: make(chan struct{}), refs: 1}
		e.buf = k.s.pool.get(int(bs))
		c.m[k] = e
		c.pushFrontLocked(e)
		c.used += cost(e.buf)
		c.mu.Unlock()

		n, err := k.s.Get(ctx, k.ino, BlockRef{Block: k.block, Gen: k.gen}, 0, *e.buf)
		if err == io.EOF {
			err = nil
		}
		e.n, e.err = n, err
		c.mu.Lock()
		switch {
		case err != nil:
			if c.m[k] == e {
				c.removeLocked(e)
			}
		case !e.dead:
			// Waiters read e.buf only once done is closed.
			old := e.buf
			if e.buf = shrink(k.s.pool, old, n); e.buf != old {
				c.used += cost(e.buf) - cost(old)
			}
		}
		c.mu.Unlock()
		close(e.done)
		if err != nil {
			c.release(e)
			return nil, err
		}
		return e, nil
	}
}

// put adds the object k whose n bytes are in buf (from k.s.pool) if the
// cache has room for it without evicting anything, and reports whether it
// did: the cache then owns buf (it keeps a short copy of a small object,
// and recycles buf). Blocks just written may be worth keeping, but not at
// the expense of blocks read.
func (c *BlockCache) put(k cacheKey, buf *[]byte, n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	need := cost(buf)
	if n <= cap(*buf)/8 { // shrink will copy it
		need = int64(n) + entryOverhead
	}
	if c.m[k] != nil || c.used+need > c.limit {
		return false
	}
	buf = shrink(k.s.pool, buf, n)
	e := &cacheEntry{key: k, buf: buf, n: n}
	c.m[k] = e
	c.pushFrontLocked(e)
	c.used += cost(buf)
	return true
}

// dropInode removes every cached object of inode ino of store s.
func (c *BlockCache) dropInode(s *Store, ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if k.s == s && k.ino == ino && (e.done == nil || closed(e.done)) {
			c.removeLocked(e)
		}
	}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
