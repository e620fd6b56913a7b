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
			parallelCreates(b, s, m.writers, m.raw)
		})
	}
}

// parallelCreates runs b.N create-like writes from writers goroutines
// (Commit, or one badger db.Update each if raw) and reports ops/s and the
// mean requests per transaction.
func parallelCreates(b *testing.B, s *Store, writers int, raw bool) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
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
				if raw {
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
}

// BenchmarkApplyLog compares a shard replica's writes with the single-copy
// store's, on the same create-like batches:
//
//   - applylog-16: ApplyLog of 16-entry groups (a Raft batch) into a store
//     opened with NoSyncWrites, from one goroutine (the FSM's);
//   - applylog-16-sync: the same with a Sync after every group, what a
//     replica would pay if its store rather than its Raft log had to be
//     durable;
//   - commit-synced-16-writers: Commit with synced writes from 16
//     goroutines (group commit), the single-copy store today.
//
// It reports ops/s (entries or commits per second).
func BenchmarkApplyLog(b *testing.B) {
	for _, mode := range []string{"applylog-16", "applylog-16-sync", "commit-synced-16-writers"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, Options{Dir: b.TempDir(), NoSyncWrites: mode != "commit-synced-16-writers"})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if mode == "commit-synced-16-writers" {
				parallelCreates(b, s, 16, false)
				return
			}
			group := make([]LogEntry, 16)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i += len(group) {
				n := min(len(group), b.N-i)
				for j := range n {
					idx := i + j + 1
					group[j] = LogEntry{Index: uint64(idx), Batch: createBatch(fmt.Sprintf("/d%02d/f%09d", idx%16, idx), TypeFile, "n1")}
				}
				res, err := s.ApplyLog(ctx, group[:n])
				if err != nil {
					b.Fatal(err)
				}
				if res[0].Err != nil {
					b.Fatal(res[0].Err)
				}
				if mode == "applylog-16-sync" {
					if err := s.Sync(); err != nil {
						b.Fatal(err)
					}
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
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

// BenchmarkRekeyAfterManyRenames measures one directory rekey (start and
// finish, RekeyPrefix) of a small directory on a store that has already
// done renames directory rekeys, each of a directory of a new name: the
// rekey records they wrote and deleted are gone, but their deleted
// versions stay in Badger until compaction drops them. The cost per op
// should not grow with renames (issue 35). The store is opened without
// synced writes, as a shard replica's is.
func BenchmarkRekeyAfterManyRenames(b *testing.B) {
	for _, renames := range []int{0, 20_000} {
		b.Run(fmt.Sprintf("renames=%d", renames), func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, Options{Dir: b.TempDir(), NoSyncWrites: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var bt Batch
			bt.PutInode("/r0", Inode{Type: TypeDir, Mode: 0o755, Version: 1})
			bt.PutInode("/r0/f", Inode{Type: TypeFile, Mode: 0o644, Version: 1})
			bt.PutEntry("/r0", Entry{Name: "f", Type: TypeFile, Home: "n1"})
			if err := s.Commit(ctx, &bt); err != nil {
				b.Fatal(err)
			}
			i := 0
			rename := func() {
				if err := s.RekeyPrefix(ctx, fmt.Sprintf("/r%d", i), fmt.Sprintf("/r%d", i+1), nil, nil); err != nil {
					b.Fatal(err)
				}
				i++
			}
			for range renames {
				rename()
			}
			b.ReportAllocs()
			for b.Loop() {
				rename()
			}
		})
	}
}
