package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// BenchmarkCommitParallel measures durable create-like commits (two
// preconditions, an inode and an entry) from 16 goroutines:
//
//   - group: the store's group commit (default MaxGroup and Linger);
//   - group-no-linger: the same without lingering (Linger -1);
//   - per-write-sync: the same committer with MaxGroup 1, one sync per
//     write;
//   - badger-update: no committer, one badger db.Update (synced) per write
//     from the 16 goroutines, for reference;
//   - group-64-writers: group commit with 64 goroutines.
//
// It reports ops/s and, for the committer, mean requests per transaction.
func BenchmarkCommitParallel(b *testing.B) {
	modes := []struct {
		name     string
		writers  int
		maxGroup int
		linger   time.Duration
		raw      bool
	}{
		{"group", 16, 0, 0, false},
		{"group-no-linger", 16, 0, -1, false},
		{"per-write-sync", 16, 1, 0, false},
		{"badger-update", 16, 0, 0, true},
		{"group-64-writers", 64, 0, 0, false},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, Options{Dir: b.TempDir(), MaxGroup: m.maxGroup, Linger: m.linger})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range m.writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						p := fmt.Sprintf("/d%02d/f%09d", w, i)
						var err error
						if m.raw {
							err = s.db.Update(func(txn *badger.Txn) error {
								bt := createBatch(p, TypeFile, "n1")
								if perr, err := bt.check(&wtxn{txn: txn}); err != nil || perr != nil {
									return fmt.Errorf("%v %v", perr, err)
								}
								return bt.write(&wtxn{txn: txn})
							})
						} else {
							err = s.Commit(ctx, createBatch(p, TypeFile, "n1"))
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
			if st := s.Stats(); st.Txns > 0 {
				b.ReportMetric(float64(st.Requests)/float64(st.Txns), "reqs/txn")
			}
		})
	}
}

// BenchmarkGetInode measures GetInode on a store of 100,000 inodes, from
// one goroutine and from GOMAXPROCS goroutines.
func BenchmarkGetInode(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 100_000
	paths := make([]string, n)
	for i := 0; i < n; i += 1000 {
		var bt Batch
		for j := i; j < i+1000; j++ {
			paths[j] = fmt.Sprintf("/bench/d%03d/file-%06d", j%100, j)
			bt.PutInode(paths[j], Inode{Type: TypeFile, Mode: 0o644, Size: int64(j), Mtime: 1, Nlink: 1, Version: 1})
		}
		if err := s.Commit(ctx, &bt); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := s.GetInode(ctx, paths[(i*7919)%n]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var seed atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(1)) * 104729
			for pb.Next() {
				i++
				if _, err := s.GetInode(ctx, paths[(i*7919)%n]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
