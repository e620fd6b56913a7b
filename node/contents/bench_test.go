package contents

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// benchSize is the file size of the sequential benchmarks: 256 MiB, or
// GHBA_BENCH_MB MiB.
func benchSize(b *testing.B) int64 {
	mb := int64(256)
	if s := os.Getenv("GHBA_BENCH_MB"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 {
			b.Fatalf("GHBA_BENCH_MB=%q", s)
		}
		mb = v
	}
	return mb << 20
}

// benchChunk is the size of one write or read call: FUSE's default
// max_write and max_read.
const benchChunk = 128 << 10

func benchData() []byte {
	p := make([]byte, benchChunk)
	r := newTestRand(1)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// writeFile writes size bytes through a File, flushes and commits.
func writeFile(b *testing.B, s *Store, ino uint64, size int64, chunk []byte) (Layout, int64) {
	ctx := context.Background()
	f := s.OpenFile(ino, 0, Layout{}, FileOptions{})
	defer f.Close()
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.WriteAt(ctx, chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	c, err := f.Flush(ctx)
	if err != nil {
		b.Fatal(err)
	}
	l, n := Merge(Layout{}, 0, c)
	f.Committed(c, l, n)
	return l, n
}

// writeOSFile writes size bytes to a new os.File called name, in chunks,
// and closes it: writeFile's counterpart.
func writeOSFile(b *testing.B, name string, size int64, chunk []byte) {
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSequentialWrite writes a file sequentially through File to a
// file:// store (Flush included) and, for comparison, with os.File in the
// same directory (Close included, no fsync for either).
func BenchmarkSequentialWrite(b *testing.B) {
	size := benchSize(b)
	chunk := benchData()
	b.Run("File", func(b *testing.B) {
		s, _ := openFileStore(b)
		b.SetBytes(size)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			l, _ := writeFile(b, s, uint64(i), size, chunk)
			b.StopTimer()
			if err := s.Delete(context.Background(), uint64(i), l.Refs()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("OSFile", func(b *testing.B) {
		_, dir := openFileStore(b)
		b.SetBytes(size)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			name := filepath.Join(dir, "os-"+strconv.Itoa(i))
			writeOSFile(b, name, size, chunk)
			b.StopTimer()
			os.Remove(name)
			b.StartTimer()
		}
	})
}

// BenchmarkSequentialRead reads a file sequentially through File from a
// file:// store, each pass with a fresh File and a cache a quarter of the
// file (so every block comes from the store, with read-ahead), and with
// os.File from the same directory. Both read from the page cache the
// write filled.
func BenchmarkSequentialRead(b *testing.B) {
	size := benchSize(b)
	chunk := benchData()
	b.Run("File", func(b *testing.B) {
		s, _ := openFileStore(b)
		l, n := writeFile(b, s, 1, size, chunk)
		p := make([]byte, benchChunk)
		ctx := context.Background()
		// A cache smaller than the file: every pass reads every block from
		// the store, recycling the buffers as a long-lived mount does.
		cache := NewBlockCache(min(DefaultCacheBytes, size/4))
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			f := s.OpenFile(1, n, l, FileOptions{Cache: cache})
			for off := int64(0); off < n; off += int64(len(p)) {
				if _, err := f.ReadAt(ctx, p, off); err != nil && err != io.EOF {
					b.Fatal(err)
				}
			}
			f.Close()
		}
	})
	b.Run("OSFile", func(b *testing.B) {
		_, dir := openFileStore(b)
		name := filepath.Join(dir, "os")
		writeOSFile(b, name, size, chunk)
		p := make([]byte, benchChunk)
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			f, err := os.Open(name)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := f.Read(p); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			f.Close()
		}
	})
}

// BenchmarkReadAtCached reads 128 KiB at a time from blocks in the cache:
// the read path's own cost (it should not allocate).
func BenchmarkReadAtCached(b *testing.B) {
	s, _ := openFileStore(b)
	const size = 16 << 20
	l, n := writeFile(b, s, 1, size, benchData())
	f := s.OpenFile(1, n, l, FileOptions{Cache: NewBlockCache(2 * size)})
	defer f.Close()
	ctx := context.Background()
	p := make([]byte, benchChunk)
	for off := int64(0); off < n; off += benchChunk { // load the cache
		if _, err := f.ReadAt(ctx, p, off); err != nil && err != io.EOF {
			b.Fatal(err)
		}
	}
	b.SetBytes(benchChunk)
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		if _, err := f.ReadAt(ctx, p, off); err != nil && err != io.EOF {
			b.Fatal(err)
		}
		if off += benchChunk; off >= n {
			off = 0
		}
	}
}
