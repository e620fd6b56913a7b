package contents

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc/rpctest"
)

func newTestRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func openFileStore(t testing.TB) (*Store, string) {
	dir := filepath.Join(t.TempDir(), "objects") // missing: Open creates it
	s, err := Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// server plays the metadata server of one inode: it merges commits into
// the layout it holds and deletes the objects a new layout drops.
type server struct {
	t      testing.TB
	s      *Store
	ino    uint64
	layout []byte // encoded, as the metadata stores it
	size   int64
	// seen: a digest of every object ever listed, to catch an overwrite.
	seen map[BlockRef][32]byte
	// concurrent: others use the file during commits.
	concurrent bool
}

func (sv *server) get() (Layout, int64) {
	l, err := DecodeLayout(sv.layout)
	if err != nil {
		sv.t.Fatal(err)
	}
	return l, sv.size
}

// commit flushes f and applies its commit as the metadata server would.
func (sv *server) commit(ctx context.Context, f *File) {
	sv.t.Helper()
	c, err := f.Flush(ctx)
	if err != nil {
		sv.t.Fatalf("flush: %v", err)
	}
	if c == nil {
		if !sv.concurrent && f.Dirty() {
			sv.t.Fatal("Flush returned no commit, yet the file is dirty")
		}
		return
	}
	old, size := sv.get()
	l, size := Merge(old, size, c)
	enc := l.Encode()
	if len(enc) > MaxLayoutLen {
		sv.t.Fatalf("layout of %d bytes", len(enc))
	}
	sv.layout, sv.size = enc, size
	if err := sv.s.Delete(ctx, sv.ino, Dropped(old, l)); err != nil {
		sv.t.Fatalf("delete dropped objects: %v", err)
	}
	f.Committed(c, l, size)
}

// check verifies that the store holds exactly the objects of the committed
// layout (nothing superseded is left behind) and that no object changed
// since it was first seen (objects are never overwritten).
func (sv *server) check(ctx context.Context) {
	sv.t.Helper()
	l, _ := sv.get()
	got, err := sv.s.Objects(ctx, sv.ino)
	if err != nil {
		sv.t.Fatal(err)
	}
	want := l.Refs()
	cmp := func(a, b BlockRef) int {
		if a.Block != b.Block {
			return int(a.Block) - int(b.Block)
		}
		if a.Gen < b.Gen {
			return -1
		}
		if a.Gen > b.Gen {
			return 1
		}
		return 0
	}
	slices.SortFunc(got, cmp)
	if !slices.Equal(got, want) {
		sv.t.Fatalf("store holds %v, committed layout references %v", got, want)
	}
	buf := make([]byte, l.BlockLen())
	for _, r := range got {
		n, err := sv.s.Get(ctx, sv.ino, r, 0, buf)
		if err != nil && err != io.EOF {
			sv.t.Fatal(err)
		}
		sum := sha256.Sum256(buf[:n])
		if prev, ok := sv.seen[r]; ok && prev != sum {
			sv.t.Fatalf("object %v was overwritten", r)
		}
		sv.seen[r] = sum
	}
}

// model is a File under test next to the bytes it should hold.
type model struct {
	t    testing.TB
	f    *File
	want []byte
}

func (m *model) write(ctx context.Context, off int64, p []byte) {
	m.t.Helper()
	n, err := m.f.WriteAt(ctx, p, off)
	if err != nil || n != len(p) {
		m.t.Fatalf("WriteAt(%d bytes at %d) = %d, %v", len(p), off, n, err)
	}
	if end := off + int64(len(p)); end > int64(len(m.want)) {
		m.want = append(m.want, make([]byte, end-int64(len(m.want)))...)
	}
	copy(m.want[off:], p)
}

// appendRandom appends chunks of chunkSize bytes drawn from r until the
// file holds at least size bytes.
func (m *model) appendRandom(ctx context.Context, r *rand.Rand, chunkSize int, size int64) {
	m.t.Helper()
	chunk := make([]byte, chunkSize)
	for int64(len(m.want)) < size {
		for i := range chunk {
			chunk[i] = byte(r.Uint32())
		}
		m.write(ctx, int64(len(m.want)), chunk)
	}
}

func (m *model) truncate(ctx context.Context, size int64) {
	m.t.Helper()
	if err := m.f.Truncate(ctx, size); err != nil {
		m.t.Fatalf("Truncate(%d): %v", size, err)
	}
	if size <= int64(len(m.want)) {
		m.want = m.want[:size]
	} else {
		m.want = append(m.want, make([]byte, size-int64(len(m.want)))...)
	}
}

func (m *model) read(ctx context.Context, off int64, n int) {
	m.t.Helper()
	p := make([]byte, n)
	got, err := m.f.ReadAt(ctx, p, off)
	size := int64(len(m.want))
	wantN := int(max(0, min(int64(n), size-off)))
	if got != wantN {
		m.t.Fatalf("ReadAt(%d bytes at %d) of %d-byte file = %d, %v; want %d", n, off, size, got, err, wantN)
	}
	if wantN < n && err != io.EOF {
		m.t.Fatalf("ReadAt(%d bytes at %d) of %d-byte file: err %v, want io.EOF", n, off, size, err)
	}
	if wantN == n && err != nil && !(err == io.EOF && off+int64(n) == size) {
		m.t.Fatalf("ReadAt(%d bytes at %d) of %d-byte file: %v", n, off, size, err)
	}
	if wantN > 0 && !bytes.Equal(p[:wantN], m.want[off:off+int64(wantN)]) {
		i := 0
		for p[i] == m.want[off+int64(i)] {
			i++
		}
		m.t.Fatalf("ReadAt(%d bytes at %d): byte %d is %d, want %d", n, off, off+int64(i), p[i], m.want[off+int64(i)])
	}
}

// readAll compares the whole file, in reads of odd sizes.
func (m *model) readAll(ctx context.Context) {
	m.t.Helper()
	if s := m.f.Size(); s != int64(len(m.want)) {
		m.t.Fatalf("Size() = %d, want %d", s, len(m.want))
	}
	for off := int64(0); off < int64(len(m.want)); off += 3001 {
		m.read(ctx, off, 3001)
	}
	m.read(ctx, int64(len(m.want)), 10)
}

// randomOps runs a random sequence of writes, truncations, reads,
// commits and re-opens on one file, comparing every read with the model.
func randomOps(t *testing.T, s *Store, seed uint64, steps int) {
	ctx := testCtx(t)
	r := newTestRand(seed)
	const bs = 4096
	ino := 0x100 + seed
	sv := &server{t: t, s: s, ino: ino, seen: map[BlockRef][32]byte{}}
	sv.layout = Layout{BlockSize: bs}.Encode()
	cache := NewBlockCache(6 * bs)
	budget := NewBudget(5 * bs)
	opts := FileOptions{MaxDirty: 4 * bs, ReadAhead: 2, Uploads: 3, Cache: cache, Budget: budget}
	open := func() *File {
		l, size := sv.get()
		return s.OpenFile(ino, size, l, opts)
	}
	m := &model{t: t, f: open()}
	defer func() { m.f.Close() }()
	const maxSize = 14 * bs
	var next int64 // where a sequential writer goes on
	for step := 0; step < steps; step++ {
		switch op := r.IntN(100); {
		case op < 40: // write: sequential, block-aligned or anywhere
			var off int64
			var n int
			switch r.IntN(3) {
			case 0:
				off, n = next, 1+r.IntN(2*bs)
			case 1:
				off, n = int64(r.IntN(maxSize/bs))*bs, bs*(1+r.IntN(2))
			default:
				off, n = int64(r.IntN(maxSize)), 1+r.IntN(bs/2)
			}
			if off+int64(n) > maxSize {
				off, n = 0, min(n, maxSize)
			}
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(1 + r.IntN(255))
			}
			m.write(ctx, off, p)
			next = off + int64(n)
		case op < 50:
			var size int64
			switch r.IntN(3) {
			case 0:
				size = int64(r.IntN(maxSize))
			case 1:
				size = int64(r.IntN(maxSize/bs)) * bs
			default:
				size = max(0, int64(len(m.want))-int64(r.IntN(bs)))
			}
			m.truncate(ctx, size)
		case op < 80:
			off := int64(r.IntN(maxSize + bs))
			if r.IntN(4) == 0 {
				off = max(0, int64(len(m.want))-int64(r.IntN(100)))
			}
			m.read(ctx, off, 1+r.IntN(3*bs))
		case op < 93:
			sv.commit(ctx, m.f)
			if m.f.Dirty() {
				t.Fatal("dirty right after a commit")
			}
			sv.check(ctx)
			m.readAll(ctx)
		default: // commit, close and re-open from the metadata
			sv.commit(ctx, m.f)
			m.f.Close()
			if cache.Used() > 6*bs+3*bs {
				t.Fatalf("cache holds %d bytes, bound %d", cache.Used(), 6*bs)
			}
			m.f = open()
			sv.check(ctx)
			m.readAll(ctx)
		}
		if used := budget.Used(); used > 5*bs+bs {
			t.Fatalf("step %d: budget holds %d bytes, bound %d", step, used, 5*bs)
		}
	}
	sv.commit(ctx, m.f)
	sv.check(ctx)
	m.readAll(ctx)
	m.f.Close()
	if used := budget.Used(); used != 0 {
		t.Fatalf("closed file still holds %d bytes of budget", used)
	}
}

func TestFileRandom(t *testing.T) {
	s, _ := openFileStore(t)
	steps := 600
	if testing.Short() {
		steps = 150
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomOps(t, s, seed, steps) })
	}
}

func TestFileHolesAndEOF(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	const bs = 1024
	f := s.OpenFile(7, 0, Layout{BlockSize: bs}, FileOptions{})
	defer f.Close()
	m := &model{t: t, f: f}
	m.read(ctx, 0, 10)                    // empty file
	m.write(ctx, 5*bs+10, []byte("tail")) // blocks 0-4 are holes
	m.truncate(ctx, 9*bs)                 // grows: a hole at the end
	m.read(ctx, 0, 12*bs)                 // past EOF
	m.read(ctx, 9*bs, 1)                  // at EOF
	m.read(ctx, 20*bs, 1)                 // far past EOF
	sv := &server{t: t, s: s, ino: 7, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
	sv.commit(ctx, f)
	sv.check(ctx)
	if l, size := sv.get(); size != 9*bs || !slices.Equal(l.Extents, []Extent{{First: 5, Count: 1, Gen: l.Extents[0].Gen}}) {
		t.Fatalf("committed %+v, size %d", l, size)
	}
	m.readAll(ctx)
	// Shrink into block 5 and grow again: the cut bytes read as zeros.
	m.truncate(ctx, 5*bs+12)
	m.truncate(ctx, 7*bs)
	m.readAll(ctx)
	sv.commit(ctx, f)
	sv.check(ctx)
	f2 := s.OpenFile(7, sv.size, mustDecode(t, sv.layout), FileOptions{})
	defer f2.Close()
	(&model{t: t, f: f2, want: m.want}).readAll(ctx)
	// Negative offsets are refused.
	if _, err := f.ReadAt(ctx, make([]byte, 1), -1); err == nil {
		t.Fatal("ReadAt at -1 succeeded")
	}
	if _, err := f.WriteAt(ctx, []byte{1}, -1); err == nil {
		t.Fatal("WriteAt at -1 succeeded")
	}
}

func mustDecode(t testing.TB, b []byte) Layout {
	l, err := DecodeLayout(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFileSequential: blocks written in full upload in the background at
// once, under one generation, so the layout is one extent.
func TestFileSequential(t *testing.T) {
	ctx := testCtx(t)
	s, dir := openFileStore(t)
	const bs = 64 << 10
	f := s.OpenFile(9, 0, Layout{BlockSize: bs}, FileOptions{MaxDirty: 4 * bs})
	defer f.Close()
	m := &model{t: t, f: f}
	m.appendRandom(ctx, newTestRand(9), 20000, 40*bs+1)
	// Full blocks are on their way before any Flush.
	deadline := time.Now().Add(time.Minute)
	for {
		refs, err := s.Objects(ctx, 9)
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) >= 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d objects uploaded before Flush", len(refs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	sv := &server{t: t, s: s, ino: 9, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
	sv.commit(ctx, f)
	sv.check(ctx)
	l, _ := sv.get()
	if len(l.Extents) != 1 || l.Extents[0].Count != 41 {
		t.Fatalf("layout %+v: want one extent of 41 blocks", l.Extents)
	}
	m.readAll(ctx)
	// The last object holds only the bytes below the size.
	last := filepath.Join(dir, filepath.FromSlash(Key(9, BlockRef{Block: 40, Gen: l.Extents[0].Gen})))
	if fi, err := os.Stat(last); err != nil || fi.Size() != int64(len(m.want))-40*bs {
		t.Fatalf("last object: %v, %v", fi, err)
	}
	// A fresh file reads it back sequentially (read-ahead) from the store.
	f2 := s.OpenFile(9, sv.size, l, FileOptions{Cache: NewBlockCache(8 * bs)})
	defer f2.Close()
	m2 := &model{t: t, f: f2, want: m.want}
	for off := int64(0); off < int64(len(m.want)); off += 50000 {
		m2.read(ctx, off, 50000)
	}
}

// TestFileConcurrent: readers of committed data while a writer extends the
// file and flushes; every read sees the committed bytes.
func TestFileConcurrent(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	const bs = 8192
	f := s.OpenFile(11, 0, Layout{BlockSize: bs}, FileOptions{MaxDirty: 3 * bs, ReadAhead: 3, Cache: NewBlockCache(4 * bs)})
	defer f.Close()
	m := &model{t: t, f: f}
	r := newTestRand(11)
	data := make([]byte, 20*bs+77)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	m.write(ctx, 0, data)
	sv := &server{t: t, s: s, ino: 11, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
	sv.commit(ctx, f)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Go(func() {
			r := newTestRand(uint64(100 + g))
			p := make([]byte, 3*bs)
			for range 200 {
				off := int64(r.IntN(len(data)))
				n := 1 + r.IntN(len(p))
				got, err := f.ReadAt(ctx, p[:n], off)
				want := data[off:min(off+int64(n), int64(len(data)))] // the file may have grown
				if got < len(want) || (err != nil && err != io.EOF) || !bytes.Equal(p[:len(want)], want) {
					errs <- fmt.Errorf("ReadAt(%d at %d) = %d, %v; mismatch", n, off, got, err)
					return
				}
			}
		})
	}
	wg.Go(func() { // a writer past the committed bytes
		p := make([]byte, 5000)
		for i := range 60 {
			for j := range p {
				p[j] = byte(i + j)
			}
			if _, err := f.WriteAt(ctx, p, int64(len(data))+int64(i*len(p))); err != nil {
				errs <- err
				return
			}
			if i%20 == 19 {
				if _, err := f.Flush(ctx); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p := make([]byte, 5000)
	for i := range 60 {
		for j := range p {
			p[j] = byte(i + j)
		}
		m.want = append(m.want, p...)
	}
	sv.commit(ctx, f)
	sv.check(ctx)
	m.readAll(ctx)
}

// TestTwoMounts: two mounts writing one file; commits merge per block,
// last close wins, and Reset shows the other mount's data.
func TestTwoMounts(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	const bs = 1024
	sv := &server{t: t, s: s, ino: 13, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
	a := s.OpenFile(13, 0, Layout{BlockSize: bs}, FileOptions{})
	b := s.OpenFile(13, 0, Layout{BlockSize: bs}, FileOptions{})
	defer a.Close()
	defer b.Close()
	fill := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	if _, err := a.WriteAt(ctx, fill('a', 2*bs), 0); err != nil { // blocks 0, 1
		t.Fatal(err)
	}
	if _, err := b.WriteAt(ctx, fill('b', 2*bs), bs); err != nil { // blocks 1, 2
		t.Fatal(err)
	}
	sv.commit(ctx, a)
	sv.commit(ctx, b) // b closes last: block 1 is b's
	sv.check(ctx)
	want := append(append(fill('a', bs), fill('b', bs)...), fill('b', bs)...)
	l, size := sv.get()
	a.Reset(size, l)
	for _, f := range []*File{a, b} {
		(&model{t: t, f: f, want: want}).readAll(ctx)
	}
	// a truncates while b extends: a's commit comes last.
	if err := a.Truncate(ctx, bs/2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt(ctx, fill('c', bs), 3*bs); err != nil {
		t.Fatal(err)
	}
	sv.commit(ctx, b)
	sv.commit(ctx, a)
	sv.check(ctx)
	l, size = sv.get()
	if size != bs/2 {
		t.Fatalf("size %d after the truncation committed last", size)
	}
	b.Reset(size, l)
	(&model{t: t, f: b, want: fill('a', bs/2)}).readAll(ctx)
	(&model{t: t, f: a, want: fill('a', bs/2)}).readAll(ctx)
}

// TestSupersededDeleted: an object uploaded and superseded before any
// commit is deleted; one offered in a commit that is then applied stays
// until the metadata drops it.
func TestSupersededDeleted(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	const bs = 1024
	sv := &server{t: t, s: s, ino: 15, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
	f := s.OpenFile(15, 0, Layout{BlockSize: bs}, FileOptions{})
	defer f.Close()
	m := &model{t: t, f: f}
	for i := range 5 { // block 0 written in full (so uploaded) five times
		m.write(ctx, 0, bytes.Repeat([]byte{byte('0' + i)}, bs))
	}
	c, err := f.Flush(ctx)
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	if refs, _ := s.Objects(ctx, 15); len(refs) != 1 {
		t.Fatalf("objects after Flush: %v; want the last one only", refs)
	}
	// Written again between Flush and Committed: the offered object must
	// survive until the metadata drops it.
	m.write(ctx, 0, bytes.Repeat([]byte{'x'}, bs))
	if _, err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	old, size := sv.get()
	l, size := Merge(old, size, c)
	sv.layout, sv.size = l.Encode(), size
	f.Committed(c, l, size)
	if refs, _ := s.Objects(ctx, 15); len(refs) != 2 {
		t.Fatalf("objects: %v; want the committed one and the new one", refs)
	}
	sv.commit(ctx, f)
	sv.check(ctx)
	m.readAll(ctx)
}

// TestBudgetWriteBack: many files with partly written blocks share a budget
// smaller than their total; writes still complete because waiting files
// make the holders write back.
func TestBudgetWriteBack(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	const bs = 4096
	budget := NewBudget(4 * bs)
	var files []*model
	for i := range 12 {
		f := s.OpenFile(uint64(0x200+i), 0, Layout{BlockSize: bs}, FileOptions{Budget: budget})
		defer f.Close()
		files = append(files, &model{t: t, f: f})
	}
	for round := range 3 {
		for i, m := range files {
			m.write(ctx, int64(round*bs+100), bytes.Repeat([]byte{byte(i + 1)}, 50))
			if budget.Used() > 4*bs {
				t.Fatalf("budget holds %d bytes", budget.Used())
			}
		}
	}
	for i, m := range files {
		m.readAll(ctx)
		sv := &server{t: t, s: s, ino: uint64(0x200 + i), seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
		sv.commit(ctx, m.f)
		sv.check(ctx)
		m.readAll(ctx)
	}
}

func TestStore(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	storeBasics(t, ctx, s)
}

// storeBasics exercises Put, ranged Get, Delete, Objects and Check.
func storeBasics(t *testing.T, ctx context.Context, s *Store) {
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	r := BlockRef{Block: 3, Gen: 42}
	data := []byte("0123456789")
	if err := s.Put(ctx, 1, r, data); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4)
	if n, err := s.Get(ctx, 1, r, 2, p); n != 4 || err != nil || string(p) != "2345" {
		t.Fatalf("Get = %d, %v, %q", n, err, p)
	}
	if n, err := s.Get(ctx, 1, r, 8, p); n != 2 || err != io.EOF || string(p[:2]) != "89" {
		t.Fatalf("Get at the end = %d, %v, %q", n, err, p[:n])
	}
	if n, err := s.Get(ctx, 1, r, 10, p); n != 0 || err != io.EOF {
		t.Fatalf("Get at the object's end = %d, %v", n, err)
	}
	if n, err := s.Get(ctx, 1, r, 50, p); n != 0 || err != io.EOF {
		t.Fatalf("Get past the object's end = %d, %v", n, err)
	}
	if _, err := s.Get(ctx, 1, BlockRef{Block: 3, Gen: 43}, 0, p); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing object: %v", err)
	}
	if refs, err := s.Objects(ctx, 1); err != nil || !slices.Equal(refs, []BlockRef{r}) {
		t.Fatalf("Objects = %v, %v", refs, err)
	}
	for range 2 { // idempotent
		if err := s.Delete(ctx, 1, []BlockRef{r, {Block: 9, Gen: 9}}); err != nil {
			t.Fatal(err)
		}
	}
	if refs, err := s.Objects(ctx, 1); err != nil || len(refs) != 0 {
		t.Fatalf("Objects after Delete = %v, %v", refs, err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := testCtx(t)
	for _, u := range []string{"gs://bucket", "mem://", "://x", "file:///tmp/x?bogus=1"} {
		if s, err := Open(ctx, u); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", u)
		}
	}
}

// TestCheckUnreachable: Check of a store nobody listens for fails with one
// line saying which step failed.
func TestCheckUnreachable(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, "s3://nobody?endpoint=http://"+rpctest.DeadAddr(t)+"&use_path_style=true&disable_https=true&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Check(ctx)
	if err == nil {
		t.Fatal("Check of an unreachable store succeeded")
	}
	if msg := err.Error(); !bytes.Contains([]byte(msg), []byte("write probe object")) || !bytes.Contains([]byte(msg), []byte("s3://nobody")) {
		t.Fatalf("Check: %v", err)
	}
	t.Log(err)
}

// TestFileClosed: a closed file refuses work and stops its uploads.
func TestFileClosed(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	budget := NewBudget(1 << 20)
	f := s.OpenFile(17, 0, Layout{BlockSize: 1024}, FileOptions{Budget: budget})
	if _, err := f.WriteAt(ctx, make([]byte, 10000), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f.Close()
	if refs, err := s.Objects(ctx, 17); err != nil || len(refs) != 0 {
		t.Fatalf("objects of a file closed without a commit: %v, %v", refs, err)
	}
	if budget.Used() != 0 {
		t.Fatalf("budget holds %d bytes after Close", budget.Used())
	}
	if _, err := f.WriteAt(ctx, []byte{1}, 0); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(ctx, make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if _, err := f.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

// TestFileChaos: writers, truncaters, readers and committers on one file at
// once, with little memory. Nothing deadlocks or races, and at the end the
// committed objects are exactly the layout's and a re-opened file reads
// what the open one does.
func TestFileChaos(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, _ := openFileStore(t)
	const bs = 2048
	sv := &server{t: t, s: s, ino: 19, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode(), concurrent: true}
	f := s.OpenFile(19, 0, Layout{BlockSize: bs}, FileOptions{MaxDirty: 3 * bs, Uploads: 2, ReadAhead: 2,
		Cache: NewBlockCache(4 * bs), Budget: NewBudget(4 * bs)})
	defer f.Close()
	var commitMu sync.Mutex // one Flush-commit-Committed at a time
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := newTestRand(uint64(300 + g))
			p := make([]byte, 3*bs)
			for range 150 {
				off := int64(r.IntN(12 * bs))
				n := 1 + r.IntN(len(p))
				switch op := r.IntN(10); {
				case op < 4:
					if _, err := f.WriteAt(ctx, p[:n], off); err != nil {
						t.Error(err)
						return
					}
				case op < 5:
					if err := f.Truncate(ctx, off); err != nil {
						t.Error(err)
						return
					}
				case op < 9:
					if _, err := f.ReadAt(ctx, p[:n], off); err != nil && err != io.EOF {
						t.Error(err)
						return
					}
				default:
					func() {
						commitMu.Lock()
						defer commitMu.Unlock()
						sv.commit(ctx, f)
					}()
				}
			}
		})
	}
	wg.Wait()
	sv.commit(ctx, f)
	sv.check(ctx)
	size := f.Size()
	want := make([]byte, size)
	if n, err := f.ReadAt(ctx, want, 0); int64(n) != size || (err != nil && err != io.EOF) {
		t.Fatal(n, err)
	}
	l, ssize := sv.get()
	if ssize != size {
		t.Fatalf("committed size %d, file size %d", ssize, size)
	}
	f2 := s.OpenFile(19, ssize, l, FileOptions{})
	defer f2.Close()
	(&model{t: t, f: f2, want: want}).readAll(ctx)
}

// TestWithdrawDeletesAtClose: a commit the metadata server will never
// apply (the inode lost its name first) leaves no object behind once the
// file closes, and the file reads its writes until then.
func TestWithdrawDeletesAtClose(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	const bs = 1024
	f := s.OpenFile(16, 0, Layout{BlockSize: bs}, FileOptions{})
	m := &model{t: t, f: f}
	m.write(ctx, 0, bytes.Repeat([]byte{'a'}, 2*bs+10))
	c, err := f.Flush(ctx)
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	if refs, _ := s.Objects(ctx, 16); len(refs) != 3 {
		t.Fatalf("objects after Flush: %v; want 3", refs)
	}
	m.write(ctx, 0, bytes.Repeat([]byte{'b'}, bs)) // an offered object superseded
	f.Withdraw(c)
	m.readAll(ctx)
	f.Close()
	if refs, err := s.Objects(ctx, 16); err != nil || len(refs) != 0 {
		t.Fatalf("objects after Withdraw and Close: %v (%v); want none", refs, err)
	}
}

// TestOfferedKeptAtClose is TestWithdrawDeletesAtClose's contrast: an
// offered commit's objects stay after Close (the server may have applied
// it; its layout owns them).
func TestOfferedKeptAtClose(t *testing.T) {
	ctx := testCtx(t)
	s, _ := openFileStore(t)
	const bs = 1024
	f := s.OpenFile(17, 0, Layout{BlockSize: bs}, FileOptions{})
	m := &model{t: t, f: f}
	m.write(ctx, 0, bytes.Repeat([]byte{'a'}, bs))
	if c, err := f.Flush(ctx); err != nil || c == nil {
		t.Fatal(c, err)
	}
	f.Close()
	if refs, err := s.Objects(ctx, 17); err != nil || len(refs) != 1 {
		t.Fatalf("objects after Close: %v (%v); want the offered one", refs, err)
	}
}

// TestCacheSmallObjects: small files written, and small files read, stay
// in a cache whose bound holds only a few blocks: it keeps short copies
// of small objects, not the block-sized buffers they were written or read
// into. Once every object is deleted from the store, all the files still
// read back from the cache.
func TestCacheSmallObjects(t *testing.T) {
	const (
		bs    = 64 << 10
		files = 200
	)
	content := func(i int) []byte { return fmt.Appendf(nil, "small file %d\n", i) }
	for _, how := range []string{"written", "read"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t)
			s, dir := openFileStore(t)
			cache := NewBlockCache(16 * bs) // 16 blocks
			writeCache := cache
			if how == "read" {
				writeCache = NewBlockCache(bs)
			}
			layouts := make([]Layout, files)
			sizes := make([]int64, files)
			for i := range files {
				ino := uint64(100 + i)
				sv := &server{t: t, s: s, ino: ino, seen: map[BlockRef][32]byte{}, layout: Layout{BlockSize: bs}.Encode()}
				f := s.OpenFile(ino, 0, Layout{BlockSize: bs}, FileOptions{Cache: writeCache})
				if _, err := f.WriteAt(ctx, content(i), 0); err != nil {
					t.Fatal(err)
				}
				sv.commit(ctx, f)
				f.Close()
				layouts[i], sizes[i] = sv.get()
			}
			read := func(i int) error {
				f := s.OpenFile(uint64(100+i), sizes[i], layouts[i], FileOptions{Cache: cache})
				defer f.Close()
				buf := make([]byte, 100)
				n, err := f.ReadAt(ctx, buf, 0)
				if err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				if !bytes.Equal(buf[:n], content(i)) {
					return fmt.Errorf("file %d: read %q", i, buf[:n])
				}
				return nil
			}
			if how == "read" {
				for i := range files {
					if err := read(i); err != nil {
						t.Fatal(err)
					}
				}
			}
			if used, most := cache.Used(), int64(files*(len(content(files))+entryOverhead)); used > most {
				t.Errorf("the cache holds %d bytes for %d small files, want at most %d", used, files, most)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			for i := range files {
				if err := read(i); err != nil {
					t.Fatalf("file %d after its object was deleted: %v (not kept by the cache)", i, err)
				}
			}
		})
	}
}
