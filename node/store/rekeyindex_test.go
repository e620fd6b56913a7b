package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// interruptRekey starts the rekey old -> nw and stops it right after its
// start, as a crash would: its record stays pending.
func interruptRekey(t *testing.T, s *Store, old, nw string) {
	t.Helper()
	crash := errors.New("crash")
	s.rekeyHook = func(int) error { return crash }
	defer func() { s.rekeyHook = nil }()
	if err := s.RekeyPrefix(context.Background(), old, nw, nil, nil); !errors.Is(err, crash) {
		t.Fatalf("interrupted RekeyPrefix(%q, %q) = %v", old, nw, err)
	}
}

// mkTree creates the directory root with one file, so that a rekey of it
// has something to move.
func mkTree(t *testing.T, s *Store, root string) {
	t.Helper()
	var b Batch
	b.PutInode(root, Inode{Type: TypeDir, Mode: 0o755, Version: 1})
	b.PutInode(root+"/f", Inode{Type: TypeFile, Mode: 0o644, Version: 1})
	b.PutEntry(root, Entry{Name: "f", Type: TypeFile, Home: "n1"})
	mustCommit(t, s, &b)
}

// wantConflict requires the rekey old -> nw to be refused for overlapping
// the pending rekey target ("old -> new").
func wantConflict(t *testing.T, s *Store, old, nw, target string) {
	t.Helper()
	err := s.RekeyPrefix(context.Background(), old, nw, nil, nil)
	var perr *PreconditionError
	if !errors.Is(err, ErrConflict) || !errors.As(err, &perr) || perr.Target != target {
		t.Fatalf("RekeyPrefix(%q, %q) = %v, want ErrConflict with %q pending", old, nw, err, target)
	}
}

func wantRekey(t *testing.T, s *Store, old, nw string) {
	t.Helper()
	if err := s.RekeyPrefix(context.Background(), old, nw, nil, nil); err != nil {
		t.Fatalf("RekeyPrefix(%q, %q) = %v, want success", old, nw, err)
	}
}

// TestRekeyIndex checks that the overlap check of a rekey start sees
// exactly the pending rekey records (rekeyIndex) after many finished
// rekeys, after Close and Open, after Restore, and once a pending one
// finishes.
func TestRekeyIndex(t *testing.T) {
	ctx := context.Background()
	opts := rekeyOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	mkTree(t, s, "/src")
	mkTree(t, s, "/r0")
	interruptRekey(t, s, "/src", "/dst/a")
	wantConflict(t, s, "/src/x", "/y", "/src -> /dst/a")

	// Many finished rekeys leave only their deleted records behind.
	for i := range 300 {
		wantRekey(t, s, fmt.Sprintf("/r%d", i), fmt.Sprintf("/r%d", i+1))
		if i%100 == 0 {
			wantConflict(t, s, "/dst", "/y", "/src -> /dst/a")
		}
	}
	wantRekey(t, s, "/r300", "/r0") // back to an old, deleted record's key
	wantConflict(t, s, "/z", "/dst/a/b", "/src -> /dst/a")

	// Close and Open: the index is loaded from the store.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	wantConflict(t, s, "/src", "/elsewhere", "/src -> /dst/a")
	wantRekey(t, s, "/r0", "/r1") // a finished rekey's record is not loaded

	// Restore over a store with another pending rekey: the index is the
	// backup's.
	backup, _ := backupOf(t, s)
	other := openStore(t, rekeyOptions(t))
	mkTree(t, other, "/q")
	interruptRekey(t, other, "/q", "/p")
	wantConflict(t, other, "/q/x", "/y", "/q -> /p")
	restoreInto(t, other, backup)
	wantRekey(t, other, "/q/x", "/y") // nothing to move: a no-op, not refused
	wantConflict(t, other, "/src/d", "/y", "/src -> /dst/a")

	// A finished rekey no longer blocks.
	for _, st := range []*Store{s, other} {
		if err := st.ResumeRekey(ctx, nil); err != nil {
			t.Fatal(err)
		}
		wantRekey(t, st, "/dst/a", "/src")
		if p, err := st.PendingRekeys(ctx); err != nil || len(p) != 0 {
			t.Fatalf("PendingRekeys = %+v, %v", p, err)
		}
	}
}

// TestRekeyIndexFirstInKeyOrder: of several pending rekeys that overlap a
// new one, the refusal names the first in key order, as a scan of the
// records did, so that every replica reports the same one.
func TestRekeyIndexFirstInKeyOrder(t *testing.T) {
	s := openStore(t, rekeyOptions(t))
	for _, p := range [][2]string{{"/c", "/d"}, {"/a", "/b"}, {"/e", "/f"}} {
		mkTree(t, s, p[0])
		interruptRekey(t, s, p[0], p[1])
	}
	for range 20 {
		wantConflict(t, s, "/e/x", "/c/y", "/c -> /d")
		wantConflict(t, s, "/f/x", "/b/y", "/a -> /b")
	}
}

// TestRekeyIndexTxn: within one transaction, a rekey start sees the rekey
// records written by the requests before it, and a transaction that does
// not commit changes nothing.
func TestRekeyIndexTxn(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, rekeyOptions(t))
	start := func(old, nw string) *request {
		rk := Rekey{Old: old, New: nw}
		return &request{
			check: func(w *wtxn) (*PreconditionError, error) { return s.rekeyStartCheck(w, rk) },
			write: func(w *wtxn) error { return w.setRekey(rk) },
		}
	}
	txn := func(reqs ...*request) error {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		_, err := s.commitPrefix(reqs, &s.stats.txns)
		return err
	}

	// One transaction: the second start sees the first's record.
	a, b := start("/a", "/b"), start("/a/x", "/c")
	if err := txn(a, b); err != nil {
		t.Fatal(err)
	}
	if a.err != nil || !errors.Is(b.err, ErrConflict) {
		t.Fatalf("starts in one transaction: %v, %v; want nil, ErrConflict", a.err, b.err)
	}
	// A transaction that fails does not leave its record in the index.
	boom := errors.New("boom")
	c := start("/m", "/n")
	if err := txn(c, &request{write: func(*wtxn) error { return boom }}); !errors.Is(err, boom) {
		t.Fatalf("failed transaction: %v", err)
	}
	// A deletion followed by a start in one transaction.
	del := &request{write: func(w *wtxn) error { return w.deleteRekey("/a") }}
	d := start("/a/x", "/c")
	if err := txn(del, d); err != nil || d.err != nil {
		t.Fatalf("start after a deletion in one transaction: %v, %v", err, d.err)
	}
	wantConflict(t, s, "/a", "/z", "/a/x -> /c")
	wantRekey(t, s, "/m/x", "/n2") // /m -> /n was never committed
	p, err := s.PendingRekeys(ctx)
	if err != nil || len(p) != 1 || p[0].Old != "/a/x" {
		t.Fatalf("PendingRekeys = %+v, %v; want /a/x only", p, err)
	}
}

// TestRekeyIndexIncompleteRestore: a store opened after an incomplete
// restore loads its rekey records from the Restore that repairs it.
func TestRekeyIndexIncompleteRestore(t *testing.T) {
	ctx := context.Background()
	src := openStore(t, rekeyOptions(t))
	mkTree(t, src, "/src")
	interruptRekey(t, src, "/src", "/dst")
	backup, _ := backupOf(t, src)

	opts := rekeyOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, bytes.NewReader(backup[:len(backup)/2])); !errors.Is(err, ErrRestoreIncomplete) {
		t.Fatalf("truncated Restore = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	restoreInto(t, s, backup)
	wantConflict(t, s, "/dst/x", "/y", "/src -> /dst")
}
