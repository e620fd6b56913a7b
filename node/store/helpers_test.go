package store

import (
	"context"
	"path"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ghba/ghba/rpc/rpctest"
)

// testOptions returns options for a small store in a fresh temp dir.
func testOptions(t testing.TB) Options {
	return Options{
		Dir:            t.TempDir(),
		Logger:         rpctest.Logger(t),
		MemTableSize:   8 << 20,
		BlockCacheSize: 4 << 20,
	}
}

// openStore opens a store and closes it at the end of the test.
func openStore(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func mustCommit(t testing.TB, s *Store, b *Batch) {
	t.Helper()
	if err := s.Commit(context.Background(), b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// createBatch is what a node commits at a directory's home to create a
// child homed on the same node: the entry and inode must both be absent.
func createBatch(p string, typ FileType, home string) *Batch {
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	var b Batch
	b.RequireEntryAbsent(dir, name)
	b.RequireInodeAbsent(p)
	b.PutInode(p, Inode{Type: typ, Mode: 0o644, UID: 1, GID: 2, Mtime: 100, Ctime: 100, Nlink: 1, Version: 1})
	b.PutEntry(dir, Entry{Name: name, Type: typ, Home: home})
	return &b
}

// dump returns every key and value in the store.
func dump(t testing.TB, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key())] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return out
}

// scanCounts counts inodes by scanning, to check the maintained counts.
func scanCounts(t testing.TB, s *Store) InodeCounts {
	t.Helper()
	var c InodeCounts
	err := s.ScanInodes(context.Background(), func(_ string, ino Inode) error {
		if ino.Type == TypeDir {
			c.Dirs++
		} else {
			c.Files++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ScanInodes: %v", err)
	}
	return c
}

func checkCounts(t testing.TB, s *Store) InodeCounts {
	t.Helper()
	got, err := s.CountInodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := scanCounts(t, s); got != want {
		t.Fatalf("CountInodes = %+v, scan says %+v", got, want)
	}
	return got
}
