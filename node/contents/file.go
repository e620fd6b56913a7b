package contents

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults of FileOptions.
const (
	DefaultMaxDirty  = 64 << 20
	DefaultReadAhead = 4
	DefaultUploads   = 8
)

// maxSpans is how many separate written ranges a dirty block tracks before
// it is filled in from its old object (random small writes).
const maxSpans = 32

// notFoundRetries bounds the re-reads of a block whose object vanished
// because the file moved on to a newer one meanwhile.
const notFoundRetries = 3

// FileOptions tune a File. Zero values take the defaults.
type FileOptions struct {
	// MaxDirty bounds the file's dirty block memory (default 64 MiB);
	// WriteAt blocks while uploads drain when it is reached.
	MaxDirty int64
	// ReadAhead is how many blocks sequential reads fetch ahead (default
	// 4; negative: none).
	ReadAhead int
	// Uploads is how many blocks the file uploads in parallel (default 8).
	Uploads int
	// Cache is the clean-block cache, shared between files (default: the
	// store's, of DefaultCacheBytes).
	Cache *BlockCache
	// Budget bounds the dirty memory of many files together (default: the
	// store's, of DefaultDirtyBytes).
	Budget *Budget
}

// span is a written byte range [lo, hi) of a block.
type span struct{ lo, hi int64 }

// dirtyBlock is a block with changes not yet uploaded, or being uploaded.
type dirtyBlock struct {
	idx uint64
	buf *[]byte // BlockSize bytes from the store's pool
	// filled: buf holds the whole block. Otherwise only spans were written
	// and the rest comes from the block's current object (or zeros).
	filled bool
	spans  []span
	// dirty: modified since the last upload started.
	dirty bool
	// uploading: an upload reads buf; nobody writes it meanwhile.
	uploading bool
	queued    bool
	// dropped: removed from the file (truncated, reset) while uploading.
	dropped bool
	// objLen: the length of the object the last upload stored.
	objLen int64
	// freed: its memory went back to the file and the budget.
	freed bool
}

// complete reports whether the block's every byte was written.
func (b *dirtyBlock) complete(bs int64) bool {
	return b.filled || (len(b.spans) == 1 && b.spans[0].lo == 0 && b.spans[0].hi == bs)
}

// covers reports whether [lo, hi) was written.
func (b *dirtyBlock) covers(lo, hi int64) bool {
	if b.filled {
		return true
	}
	for _, s := range b.spans {
		if s.lo <= lo && hi <= s.hi {
			return true
		}
	}
	return false
}

// add records [lo, hi) as written, merging touching spans.
func (b *dirtyBlock) add(lo, hi int64) {
	if b.filled {
		return
	}
	if n := len(b.spans); n > 0 && b.spans[n-1].lo <= lo && lo <= b.spans[n-1].hi {
		b.spans[n-1].hi = max(b.spans[n-1].hi, hi) // appending: the common case
		return
	}
	out := b.spans[:0:0]
	i := 0
	for ; i < len(b.spans) && b.spans[i].hi < lo; i++ {
		out = append(out, b.spans[i])
	}
	for ; i < len(b.spans) && b.spans[i].lo <= hi; i++ {
		lo, hi = min(lo, b.spans[i].lo), max(hi, b.spans[i].hi)
	}
	out = append(out, span{lo, hi})
	out = append(out, b.spans[i:]...)
	b.spans = out
}

// fill makes buf the whole block: the bytes not written come from old (the
// block's current object; zeros past its end).
func (b *dirtyBlock) fill(old []byte) {
	buf := *b.buf
	pos := int64(0)
	gap := func(lo, hi int64) {
		if lo >= hi {
			return
		}
		n := int64(0)
		if lo < int64(len(old)) {
			n = int64(copy(buf[lo:hi], old[lo:]))
		}
		clear(buf[lo+n : hi])
	}
	for _, s := range b.spans {
		gap(pos, s.lo)
		pos = s.hi
	}
	gap(pos, int64(len(buf)))
	b.filled, b.spans = true, nil
}

// orphan is an object this file uploaded that no longer holds its block.
type orphan struct {
	ref     BlockRef
	offered bool // in the Commit last handed out by Flush
}

// File is the contents of one open file in one mount, shared by its open
// handles. Its methods are safe for concurrent use.
//
// Reads see the file's own writes at once. Writes are buffered per block;
// a block written in full is uploaded in the background at once, the rest
// at Flush. Every upload is a new object under a generation never used for
// that block, so an object a committed layout references is never
// overwritten. Flush returns the Commit to apply to the metadata; after
// the metadata server applied it, Committed tells the file its new base.
// A file must be Flushed and its Commit committed before Close, or the
// writes since the last commit are lost. The Flush-commit-Committed
// sequences of one File must not overlap: a Flush after a Flush whose
// Commit was not followed by Committed means that Commit was abandoned
// (or its fate is unknown), and the new Commit includes its changes.
type File struct {
	s      *Store
	ino    uint64
	bs     int64
	opts   FileOptions
	cache  *BlockCache
	budget *Budget

	ctx    context.Context // background work; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when blocks finish uploading or go
	closed   bool
	size     int64
	baseSize int64  // the size of the last commit
	cur      Layout // the last commit's layout, with this file's later truncations and uploads
	blocks   map[uint64]*dirtyBlock
	dirtyMem int64 // bytes of block buffers held (dirty, uploading, reserved)
	queue    []*dirtyBlock
	workers  int
	flying   map[*dirtyBlock]struct{} // blocks being uploaded, dropped ones too
	pend     map[uint64]uint64        // uploaded since the last commit: block -> gen
	offered  map[BlockRef]bool        // in the Commit Flush last returned
	orphans  []orphan
	// Truncations since the Commit Flush last returned (trunc), and the
	// ones in it (offTrunc), until Committed.
	trunc, offTrunc         bool
	truncSize, offTruncSize int64
	epoch                   uint64              // generation of this commit epoch's uploads
	epochUsed               map[uint64]struct{} // blocks uploaded (or tried) under epoch
	rng                     *rand.ChaCha8
	err                     error // a background upload's error, for the next Flush
	lastEnd                 int64 // end of the last read, for sequential detection
	raInflight              int
}

// OpenFile returns the contents of inode ino, of size bytes laid out as
// layout (the last committed state in the metadata).
func (s *Store) OpenFile(ino uint64, size int64, layout Layout, opts FileOptions) *File {
	if opts.MaxDirty <= 0 {
		opts.MaxDirty = DefaultMaxDirty
	}
	if opts.ReadAhead == 0 {
		opts.ReadAhead = DefaultReadAhead
	} else if opts.ReadAhead < 0 {
		opts.ReadAhead = 0
	}
	if opts.Uploads <= 0 {
		opts.Uploads = DefaultUploads
	}
	if opts.Cache == nil {
		opts.Cache = s.cache
	}
	if opts.Budget == nil {
		opts.Budget = s.budget
	}
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	ctx, cancel := context.WithCancel(context.Background())
	f := &File{
		s: s, ino: ino, bs: layout.BlockLen(), opts: opts, cache: opts.Cache, budget: opts.Budget,
		ctx: ctx, cancel: cancel,
		changed: make(chan struct{}),
		rng:     rand.NewChaCha8(seed),
	}
	f.resetLocked(size, layout)
	return f
}

// resetLocked makes layout and size the file's base, dropping local state.
func (f *File) resetLocked(size int64, layout Layout) {
	for _, b := range f.blocks {
		f.dropBlockLocked(b)
	}
	for blk, gen := range f.pend {
		f.orphanLocked(BlockRef{Block: blk, Gen: gen})
	}
	f.size, f.baseSize = size, size
	f.cur = layout.Clone()
	f.cur.BlockSize = f.bs
	f.blocks = make(map[uint64]*dirtyBlock)
	f.pend = make(map[uint64]uint64)
	if f.flying == nil {
		f.flying = make(map[*dirtyBlock]struct{})
	}
	f.trunc, f.offTrunc = false, false
	f.lastEnd = 0
	f.newEpochLocked()
}

func (f *File) newEpochLocked() {
	f.epoch = f.randGenLocked()
	f.epochUsed = make(map[uint64]struct{})
}

func (f *File) randGenLocked() uint64 {
	for {
		if g := f.rng.Uint64(); g != 0 {
			return g
		}
	}
}

// genLocked returns a generation for a new upload of block idx: the
// epoch's, unless this block was already uploaded under it (or its object
// has it by chance), else a fresh random one. No (block, gen) is ever
// uploaded twice.
func (f *File) genLocked(idx uint64) uint64 {
	gen := f.epoch
	_, used := f.epochUsed[idx]
	if cg, ok := f.cur.Gen(idx); used || (ok && cg == gen) {
		for {
			gen = f.randGenLocked()
			if cg, ok := f.cur.Gen(idx); !ok || cg != gen {
				break
			}
		}
	} else {
		f.epochUsed[idx] = struct{}{}
	}
	return gen
}

// notifyLocked wakes the goroutines waiting for a change.
func (f *File) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// waitLocked releases f.mu until the next change or ctx is done.
func (f *File) waitLocked(ctx context.Context) error {
	ch := f.changed
	f.mu.Unlock()
	defer f.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("contents: inode %016x: %w", f.ino, ctx.Err())
	}
}

// Size returns the file's size as this mount sees it.
func (f *File) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// Dirty reports whether the file has changes its metadata does not have
// yet: buffered writes, uploads not committed, a truncation or a new size.
func (f *File) Dirty() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dirtyLocked()
}

func (f *File) dirtyLocked() bool {
	return len(f.blocks) > 0 || len(f.pend) > 0 || f.trunc || f.offTrunc || f.size != f.baseSize
}

// uploadErr returns the pending background upload error, if any.
func (f *File) uploadErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt: n < len(p) only with an
// error, io.EOF at the end of the file. Holes read as zeros.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("contents: read at negative offset %d", off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return 0, ErrClosed
	}
	size := f.size
	if off >= size {
		f.mu.Unlock()
		return 0, io.EOF
	}
	want := p
	var eof error
	if int64(len(p)) > size-off {
		want, eof = p[:size-off], io.EOF
	}
	end := off + int64(len(want))
	seq := off == 0 || (off >= f.lastEnd-f.bs && off <= f.lastEnd+f.bs)
	f.lastEnd = end
	f.mu.Unlock()

	first, last := uint64(off/f.bs), uint64((end-1)/f.bs)
	if first == last {
		if err := f.readBlock(ctx, first, want, off%f.bs, seq); err != nil {
			return 0, err
		}
	} else {
		var wg sync.WaitGroup
		errs := make([]error, last-first+1)
		for idx := first; idx <= last; idx++ {
			lo := max(off, int64(idx)*f.bs)
			hi := min(end, int64(idx+1)*f.bs)
			dst := want[lo-off : hi-off]
			if idx == last {
				errs[idx-first] = f.readBlock(ctx, idx, dst, lo%f.bs, seq)
				continue
			}
			wg.Go(func() { errs[idx-first] = f.readBlock(ctx, idx, dst, lo%f.bs, seq) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
	}
	if seq && f.opts.ReadAhead > 0 {
		f.readAhead(last + 1)
	}
	return len(want), eof
}

// readBlock fills dst with the bytes of block idx from offset boff.
func (f *File) readBlock(ctx context.Context, idx uint64, dst []byte, boff int64, seq bool) error {
	hi := boff + int64(len(dst))
	for attempt := 0; ; attempt++ {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return ErrClosed
		}
		if b := f.blocks[idx]; b != nil {
			if !b.covers(boff, hi) {
				if err := f.fillLocked(ctx, b); err != nil {
					f.mu.Unlock()
					return err
				}
				f.mu.Unlock()
				continue // the block may have changed meanwhile
			}
			copy(dst, (*b.buf)[boff:hi])
			f.mu.Unlock()
			return nil
		}
		gen, ok := f.cur.Gen(idx)
		f.mu.Unlock()
		if !ok {
			clear(dst)
			return nil
		}
		err := f.readObject(ctx, idx, gen, dst, boff, seq)
		if errors.Is(err, ErrNotFound) && attempt < notFoundRetries && f.movedOn(idx, gen) {
			continue
		}
		return err
	}
}

// movedOn reports whether block idx is no longer the object gen.
func (f *File) movedOn(idx, gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.cur.Gen(idx)
	return !ok || g != gen || f.blocks[idx] != nil
}

// readObject copies the bytes [boff, boff+len(dst)) of object (idx, gen)
// into dst: from the cache, else by loading the whole object into the
// cache (sequential access), else by a ranged read.
func (f *File) readObject(ctx context.Context, idx, gen uint64, dst []byte, boff int64, seq bool) error {
	k := cacheKey{s: f.s, ino: f.ino, block: idx, gen: gen}
	e := f.cache.lookup(k)
	if e == nil && (seq || f.cache.has(k)) {
		var err error
		if e, err = f.cache.get(ctx, k, f.bs); err != nil {
			return err
		}
	}
	if e != nil {
		n := 0
		if data := e.data(); boff < int64(len(data)) {
			n = copy(dst, data[boff:])
		}
		f.cache.release(e)
		clear(dst[n:])
		return nil
	}
	n, err := f.s.Get(ctx, f.ino, BlockRef{Block: idx, Gen: gen}, boff, dst)
	if err != nil && err != io.EOF {
		return err
	}
	clear(dst[n:])
	return nil
}

// readAhead starts background loads of the blocks from next on that a
// sequential reader will want, up to ReadAhead in flight.
func (f *File) readAhead(next uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for idx := next; idx < next+uint64(f.opts.ReadAhead); idx++ {
		if f.closed || f.raInflight >= f.opts.ReadAhead || int64(idx)*f.bs >= f.size {
			return
		}
		if f.blocks[idx] != nil {
			continue
		}
		gen, ok := f.cur.Gen(idx)
		if !ok {
			continue
		}
		k := cacheKey{s: f.s, ino: f.ino, block: idx, gen: gen}
		if f.cache.has(k) {
			continue
		}
		f.raInflight++
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if e, err := f.cache.get(f.ctx, k, f.bs); err == nil {
				f.cache.release(e)
			}
			f.mu.Lock()
			f.raInflight--
			f.mu.Unlock()
		}()
	}
}

// fillLocked makes dirty block b whole, reading its current object. It may
// release f.mu meanwhile: callers look at the file again after it.
func (f *File) fillLocked(ctx context.Context, b *dirtyBlock) error {
	for attempt := 0; !b.filled; attempt++ {
		if f.blocks[b.idx] != b {
			return nil
		}
		if b.uploading {
			if err := f.waitLocked(ctx); err != nil {
				return err
			}
			continue
		}
		gen, ok := f.cur.Gen(b.idx)
		if !ok {
			b.fill(nil)
			return nil
		}
		f.mu.Unlock()
		e, err := f.cache.get(ctx, cacheKey{s: f.s, ino: f.ino, block: b.idx, gen: gen}, f.bs)
		f.mu.Lock()
		if err != nil {
			if errors.Is(err, ErrNotFound) && attempt < notFoundRetries {
				if g, ok := f.cur.Gen(b.idx); !ok || g != gen {
					continue
				}
			}
			return err
		}
		if f.blocks[b.idx] == b && !b.filled && !b.uploading {
			if g, ok := f.cur.Gen(b.idx); ok && g == gen {
				b.fill(e.data())
			}
		}
		f.cache.release(e)
	}
	return nil
}

// WriteAt writes p at off, growing the file as needed. It blocks while the
// file's or the budget's dirty memory is spent, until uploads drain.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || off > math.MaxInt64-int64(len(p)) {
		return 0, fmt.Errorf("contents: write of %d bytes at offset %d", len(p), off)
	}
	written := 0
	f.mu.Lock()
	defer f.mu.Unlock()
	for written < len(p) {
		if f.closed {
			return written, ErrClosed
		}
		pos := off + int64(written)
		idx, boff := uint64(pos/f.bs), pos%f.bs
		n := min(f.bs-boff, int64(len(p)-written))
		b := f.blocks[idx]
		if b == nil {
			if err := f.newBlockLocked(ctx, idx); err != nil {
				return written, err
			}
			continue
		}
		if b.uploading {
			if err := f.waitLocked(ctx); err != nil {
				return written, err
			}
			continue
		}
		if !b.covers(boff, boff+n) && len(b.spans) >= maxSpans {
			if err := f.fillLocked(ctx, b); err != nil {
				return written, err
			}
			continue
		}
		copy((*b.buf)[boff:], p[written:written+int(n)])
		b.add(boff, boff+n)
		b.dirty = true
		if end := pos + n; end > f.size {
			f.size = end
		}
		if b.complete(f.bs) {
			f.enqueueLocked(b)
		}
		written += int(n)
	}
	return written, nil
}

// newBlockLocked adds an empty dirty block idx, waiting for memory. It may
// release f.mu meanwhile: callers look at the file again after it.
func (f *File) newBlockLocked(ctx context.Context, idx uint64) error {
	for f.dirtyMem > 0 && f.dirtyMem+f.bs > f.opts.MaxDirty {
		if f.err != nil {
			return f.err
		}
		f.writeBackLocked()
		if err := f.waitLocked(ctx); err != nil {
			return err
		}
		if f.closed {
			return ErrClosed
		}
	}
	f.dirtyMem += f.bs // reserved while waiting for the budget
	f.mu.Unlock()
	err := f.budget.acquire(ctx, f, f.bs)
	f.mu.Lock()
	if err != nil || f.closed || f.blocks[idx] != nil {
		f.dirtyMem -= f.bs
		f.notifyLocked() // for writers waiting on MaxDirty
		if err == nil {
			f.budget.release(f, f.bs)
		}
		if err == nil && f.closed {
			err = ErrClosed
		}
		return err
	}
	f.blocks[idx] = &dirtyBlock{idx: idx, buf: f.s.pool.get(int(f.bs))}
	return nil
}

// freeBlockLocked gives back the memory of a block that is gone.
func (f *File) freeBlockLocked(b *dirtyBlock) {
	if b.freed {
		return
	}
	b.freed = true
	if b.buf != nil {
		f.s.pool.put(b.buf)
		b.buf = nil
	}
	f.dirtyMem -= f.bs
	f.budget.release(f, f.bs)
}

// dropBlockLocked removes dirty block b; an upload in flight finishes
// into an orphan.
func (f *File) dropBlockLocked(b *dirtyBlock) {
	delete(f.blocks, b.idx)
	b.dropped = true
	if !b.uploading {
		f.freeBlockLocked(b)
	}
	f.notifyLocked() // a Flush may wait for it
}

// orphanLocked records an object of this file that holds no block.
func (f *File) orphanLocked(r BlockRef) {
	f.orphans = append(f.orphans, orphan{ref: r, offered: f.offered[r]})
}

// enqueueLocked queues b for upload and starts workers as needed.
func (f *File) enqueueLocked(b *dirtyBlock) {
	if b.queued || b.uploading || !b.dirty || f.closed {
		return
	}
	b.queued = true
	f.queue = append(f.queue, b)
	for f.workers < f.opts.Uploads && f.workers < len(f.queue) {
		f.workers++
		f.wg.Add(1)
		go f.uploader()
	}
}

// writeBack queues the file's dirty blocks, partly written ones included,
// when it has no upload in flight (which would free memory by itself).
func (f *File) writeBack() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writeBackLocked()
}

func (f *File) writeBackLocked() {
	for _, b := range f.blocks {
		if b.uploading || b.queued {
			return
		}
	}
	for _, b := range f.blocks {
		f.enqueueLocked(b)
	}
}

// uploader uploads queued blocks until the queue is empty.
func (f *File) uploader() {
	defer f.wg.Done()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.queue) > 0 && !f.closed {
		b := f.queue[0]
		f.queue[0] = nil
		f.queue = f.queue[1:]
		b.queued = false
		if b.dropped || b.uploading || !b.dirty {
			f.notifyLocked() // a Flush may wait for it
			continue
		}
		b.uploading, b.dirty = true, false
		f.flying[b] = struct{}{}
		gen := f.genLocked(b.idx)
		err := f.uploadLocked(b, gen)
		delete(f.flying, b)
		f.finishLocked(b, gen, err)
	}
	f.workers--
}

// uploadLocked fills b in if need be and stores it as object (b.idx, gen).
// It releases f.mu meanwhile.
func (f *File) uploadLocked(b *dirtyBlock, gen uint64) error {
	if !b.filled {
		oldGen, ok := f.cur.Gen(b.idx)
		if !ok {
			b.fill(nil)
		} else {
			f.mu.Unlock()
			e, err := f.cache.get(f.ctx, cacheKey{s: f.s, ino: f.ino, block: b.idx, gen: oldGen}, f.bs)
			f.mu.Lock()
			if err != nil {
				return err
			}
			b.fill(e.data())
			f.cache.release(e)
		}
	}
	n := min(f.bs, f.size-int64(b.idx)*f.bs) // bytes past the size are zeros
	if n <= 0 {
		n = 0
	}
	f.mu.Unlock()
	err := f.s.Put(f.ctx, f.ino, BlockRef{Block: b.idx, Gen: gen}, (*b.buf)[:n])
	f.mu.Lock()
	b.objLen = n
	return err
}

// finishLocked records the end of b's upload as object (b.idx, gen).
func (f *File) finishLocked(b *dirtyBlock, gen uint64, err error) {
	b.uploading = false
	ref := BlockRef{Block: b.idx, Gen: gen}
	defer f.notifyLocked()
	if f.closed && !b.dropped {
		delete(f.blocks, b.idx)
		b.dropped = true
	}
	if err != nil {
		f.orphans = append(f.orphans, orphan{ref: ref}) // it may exist in part
		if b.dropped {
			f.freeBlockLocked(b)
			return
		}
		b.dirty = true
		if f.err == nil {
			f.err = fmt.Errorf("contents: inode %016x: upload of block %d: %w", f.ino, b.idx, err)
		}
		return
	}
	if b.dropped {
		f.orphans = append(f.orphans, orphan{ref: ref})
		f.freeBlockLocked(b)
		return
	}
	if old, ok := f.pend[b.idx]; ok {
		f.orphanLocked(BlockRef{Block: b.idx, Gen: old})
	}
	f.pend[b.idx] = gen
	f.cur.Set(b.idx, gen)
	if b.dirty { // cannot happen: writers wait for uploads
		f.enqueueLocked(b)
		return
	}
	delete(f.blocks, b.idx)
	// The tail of a file is kept (if the cache has room): appending after a
	// Flush fills it in again. Full blocks are not: a large copy would
	// only churn the cache.
	if b.objLen < f.bs && f.cache.put(cacheKey{s: f.s, ino: f.ino, block: b.idx, gen: gen}, b.buf, int(b.objLen)) {
		b.buf = nil // the cache's now
	}
	f.freeBlockLocked(b)
}

// Truncate sets the file's size. Shrinking into the middle of a block
// rewrites that block with zeros past the new size (read back from its
// object if need be) so that growing the file later reads zeros there.
func (f *File) Truncate(ctx context.Context, size int64) error {
	if size < 0 {
		return fmt.Errorf("contents: truncate to negative size %d", size)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if f.closed {
			return ErrClosed
		}
		if size < f.size {
			keep := uint64(size / f.bs)
			tail := size % f.bs
			if tail != 0 {
				keep++
			}
			for idx, b := range f.blocks {
				if idx >= keep {
					f.dropBlockLocked(b)
				}
			}
			for idx, gen := range f.pend {
				if idx >= keep {
					f.orphanLocked(BlockRef{Block: idx, Gen: gen})
					delete(f.pend, idx)
				}
			}
			f.cur.Truncate(size)
			if tail != 0 {
				idx := keep - 1
				b := f.blocks[idx]
				if b == nil {
					if _, ok := f.cur.Gen(idx); ok {
						if err := f.newBlockLocked(ctx, idx); err != nil {
							return err
						}
						continue
					}
				} else {
					if b.uploading {
						if err := f.waitLocked(ctx); err != nil {
							return err
						}
						continue
					}
					clear((*b.buf)[tail:])
					if !b.filled {
						b.spans = clipSpans(b.spans, tail)
					}
					b.add(tail, f.bs)
					b.dirty = true
				}
			}
		}
		f.size = size
		if !f.trunc || size < f.truncSize {
			f.truncSize = size
		}
		f.trunc = true
		return nil
	}
}

// clipSpans cuts spans at limit.
func clipSpans(spans []span, limit int64) []span {
	out := spans[:0]
	for _, s := range spans {
		if s.lo >= limit {
			break
		}
		s.hi = min(s.hi, limit)
		out = append(out, s)
	}
	return out
}

// Flush uploads every dirty block (filling partly written ones in from
// their old object) and waits for all uploads. It returns what to commit to
// the metadata, nil if nothing changed since the last commit. Objects this
// file uploaded and replaced before ever offering them are deleted.
func (f *File) Flush(ctx context.Context) (*Commit, error) {
	f.mu.Lock()
	// Wait for the blocks dirty now and the uploads in flight now; writes
	// that come later are not waited for (they would starve Flush).
	snap := make([]*dirtyBlock, 0, len(f.blocks)+len(f.flying))
	for _, b := range f.blocks {
		snap = append(snap, b)
	}
	for b := range f.flying {
		if b.dropped {
			snap = append(snap, b)
		}
	}
	for {
		if f.closed {
			f.mu.Unlock()
			return nil, ErrClosed
		}
		if err := f.err; err != nil {
			f.err = nil // the failed blocks are still dirty: the next Flush retries them
			f.mu.Unlock()
			return nil, err
		}
		pending := false
		for _, b := range snap {
			switch {
			case b.uploading:
				pending = true
			case b.dropped || f.blocks[b.idx] != b:
				// Uploaded (or gone).
			case b.queued:
				pending = true
			case b.dirty:
				f.enqueueLocked(b)
				pending = true
			default:
				f.dropBlockLocked(b) // allocated, never written: nothing to upload
			}
		}
		if !pending {
			break
		}
		if err := f.waitLocked(ctx); err != nil {
			f.mu.Unlock()
			return nil, err
		}
	}
	var garbage []BlockRef
	keep := f.orphans[:0]
	for _, o := range f.orphans {
		if o.offered {
			keep = append(keep, o)
		} else {
			garbage = append(garbage, o.ref)
		}
	}
	f.orphans = keep
	var c *Commit
	if f.dirtyLocked() {
		c = &Commit{Blocks: make(map[uint64]uint64, len(f.pend)), Size: f.size}
		for blk, gen := range f.pend {
			c.Blocks[blk] = gen
		}
		if f.trunc || f.offTrunc {
			c.Truncated = true
			switch {
			case !f.offTrunc:
				c.TruncSize = f.truncSize
			case !f.trunc:
				c.TruncSize = f.offTruncSize
			default:
				c.TruncSize = min(f.truncSize, f.offTruncSize)
			}
			f.offTrunc, f.offTruncSize = true, c.TruncSize
			f.trunc = false
		}
		f.offered = make(map[BlockRef]bool, len(c.Blocks))
		for blk, gen := range c.Blocks {
			f.offered[BlockRef{Block: blk, Gen: gen}] = true
		}
	}
	f.mu.Unlock()
	if len(garbage) > 0 {
		if err := f.s.Delete(ctx, f.ino, garbage); err != nil {
			f.mu.Lock()
			for _, r := range garbage {
				f.orphans = append(f.orphans, orphan{ref: r})
			}
			f.mu.Unlock()
		}
	}
	return c, nil
}

// Committed tells the file that the metadata server applied c (from this
// file's last Flush) and now holds layout and size: they become the file's
// base, with the changes made since Flush on top. Objects this file
// uploaded that c does not reference and nothing else does (superseded
// before being committed) are deleted at once.
func (f *File) Committed(c *Commit, layout Layout, size int64) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	inC := func(r BlockRef) bool {
		if c == nil {
			return false
		}
		g, ok := c.Blocks[r.Block]
		return ok && g == r.Gen
	}
	if c != nil {
		for blk, gen := range c.Blocks {
			if f.pend[blk] == gen {
				delete(f.pend, blk)
			}
		}
	}
	var garbage []BlockRef
	for _, o := range f.orphans {
		if !inC(o.ref) {
			garbage = append(garbage, o.ref)
		}
	}
	f.orphans = nil
	f.offered = nil
	f.offTrunc = false
	// The new base, with what this file did since Flush on top.
	rest := &Commit{Blocks: f.pend, Truncated: f.trunc, TruncSize: f.truncSize, Size: f.size}
	grown := c == nil || f.size != c.Size // written past the committed size since Flush
	newSize := f.size
	f.cur, newSize = Merge(layout, size, rest)
	if !f.trunc && !grown {
		newSize = size // the server's word, e.g. after another mount's truncation
	}
	f.cur.BlockSize = f.bs
	f.size = newSize
	f.baseSize = size
	f.newEpochLocked()
	f.mu.Unlock()
	if len(garbage) > 0 {
		if err := f.s.Delete(f.ctx, f.ino, garbage); err != nil {
			f.mu.Lock()
			for _, r := range garbage {
				f.orphans = append(f.orphans, orphan{ref: r})
			}
			f.mu.Unlock()
		}
	}
}

// Withdraw tells the file that the metadata server will never apply c
// (from this file's last Flush): the inode it was for lost its last name
// before any commit of it was applied. Its objects are then no longer
// kept for the server: the file keeps reading them while open, and Close
// deletes them, as it deletes what was never offered.
func (f *File) Withdraw(c *Commit) {
	if c == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for blk, gen := range c.Blocks {
		delete(f.offered, BlockRef{Block: blk, Gen: gen})
	}
	for i := range f.orphans {
		if g, ok := c.Blocks[f.orphans[i].ref.Block]; ok && g == f.orphans[i].ref.Gen {
			f.orphans[i].offered = false
		}
	}
}

// Reset makes size and layout the file's base after another mount changed
// the file (close-to-open consistency): cached blocks of the file are
// dropped. Callers call it only when the file is not Dirty; anything dirty
// would be dropped.
func (f *File) Reset(size int64, layout Layout) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.resetLocked(size, layout)
	f.cache.dropInode(f.s, f.ino)
	f.notifyLocked()
}

// closeCleanup bounds the time Close spends deleting objects no commit
// references.
const closeCleanup = 10 * time.Second

// Close stops the file's background work and releases its memory. Writes
// not committed are lost: Close deletes (best effort, briefly) the objects
// this file uploaded that no Commit it handed out references.
func (f *File) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.cancel()
	f.notifyLocked()
	f.mu.Unlock()
	f.wg.Wait()
	f.mu.Lock()
	for _, b := range f.blocks {
		f.dropBlockLocked(b)
	}
	f.queue = nil
	var garbage []BlockRef
	for _, o := range f.orphans {
		if !o.offered {
			garbage = append(garbage, o.ref)
		}
	}
	for blk, gen := range f.pend {
		if r := (BlockRef{Block: blk, Gen: gen}); !f.offered[r] {
			garbage = append(garbage, r)
		}
	}
	f.orphans, f.pend = nil, nil
	f.mu.Unlock()
	if len(garbage) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), closeCleanup)
		defer cancel()
		_ = f.s.Delete(ctx, f.ino, garbage)
	}
}
