package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// testEntries returns log entries from..from+n-1 of a deterministic
// workload. Entry i creates /w/dNN/fIIIIII (with a layout of layout bytes)
// and records intent "in-i"; every 5th entry also requires an inode that
// never exists, so it fails and changes nothing; every 7th deletes the file
// and intent of entry i-3 (absent if that one failed).
func testEntries(from, n, layout int) []LogEntry {
	out := make([]LogEntry, 0, n)
	for i := from; i < from+n; i++ {
		var b Batch
		p := testEntryPath(i)
		b.RequireInodeAbsent(p)
		if i%5 == 0 {
			b.RequireInodeExists("/never")
		}
		b.PutInode(p, Inode{Type: TypeFile, Size: int64(i), Layout: make([]byte, layout), Version: uint64(i)})
		b.PutEntry(p[:6], Entry{Name: p[7:], Type: TypeFile, Home: "n1"})
		b.putIntent(Intent{ID: fmt.Sprintf("in-%d", i), Created: int64(i)})
		if i%7 == 0 {
			b.DeleteInode(testEntryPath(i - 3))
			b.DeleteIntent(fmt.Sprintf("in-%d", i-3))
		}
		b.SetMeta("last", fmt.Appendf(nil, "%d", i))
		out = append(out, LogEntry{Index: uint64(i), Batch: &b})
	}
	return out
}

func testEntryPath(i int) string { return fmt.Sprintf("/w/d%02d/f%06d", i%10, i) }

// applyAll applies entries in groups of size and checks that nothing fails
// but what testEntries makes fail.
func applyAll(t testing.TB, s *Store, entries []LogEntry, size int) {
	t.Helper()
	for from := 0; from < len(entries); from += size {
		res, err := s.ApplyLog(context.Background(), entries[from:min(from+size, len(entries))])
		if err != nil {
			t.Fatalf("ApplyLog: %v", err)
		}
		for _, r := range res {
			if r.Err != nil && (r.Index%5 != 0 || !errors.Is(r.Err, ErrNotFound)) {
				t.Fatalf("entry %d: %v", r.Index, r.Err)
			}
		}
	}
}

// modelDump is the dump of a fresh store that applied entries.
func modelDump(t *testing.T, entries []LogEntry) map[string]string {
	t.Helper()
	s, err := Open(context.Background(), Options{Dir: t.TempDir(), NoSyncWrites: true, MemTableSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	applyAll(t, s, entries, 64)
	return dump(t, s)
}

func mustApplied(t testing.TB, s *Store, want uint64) {
	t.Helper()
	got, err := s.AppliedIndex(context.Background())
	if err != nil || got != want {
		t.Fatalf("AppliedIndex = %d, %v; want %d", got, err, want)
	}
}

type wantResult struct {
	skipped        bool
	err            error // errors.Is; nil: success
	added, removed []string
}

func TestApplyLog(t *testing.T) {
	batch := func(add func(b *Batch)) *Batch {
		var b Batch
		add(&b)
		return &b
	}
	file := Inode{Type: TypeFile}
	creates := func(from, n int) []LogEntry {
		var out []LogEntry
		for i := from; i < from+n; i++ {
			out = append(out, LogEntry{Index: uint64(i), Batch: createBatch(fmt.Sprintf("/s%d", i), TypeFile, "n1")})
		}
		return out
	}
	cases := []struct {
		name    string
		before  []LogEntry
		entries []LogEntry
		want    []wantResult
		applied uint64
		exist   []string
		absent  []string
		same    bool // the store is unchanged
	}{
		{
			name: "order, isolation, added and removed",
			entries: []LogEntry{
				{1, createBatch("/a", TypeDir, "n1")},
				{2, batch(func(b *Batch) { b.RequireInodeExists("/a"); b.PutInode("/a/b", file) })},
				{3, batch(func(b *Batch) { b.RequireInodeAbsent("/a"); b.PutInode("/c", file) })},
				{4, batch(func(b *Batch) { b.RequireInodeAbsent("/c"); b.PutInode("/c", file) })},
				{5, batch(func(b *Batch) { b.PutInode("/a/b", Inode{Type: TypeFile, Size: 5}) })},
				{6, batch(func(b *Batch) { b.PutInode("/x", file); b.DeleteInode("/x") })},
				{7, batch(func(b *Batch) { b.DeleteInode("/c"); b.PutInode("/c", file) })},
				{8, batch(func(b *Batch) { b.DeleteInode("/a/b"); b.DeleteInode("/nope"); b.PutInode("/d", file) })},
				{9, nil},
				{10, batch(func(b *Batch) { b.PutInode("/e", file); b.DeleteInode("rel") })},
				{11, batch(func(b *Batch) { b.RequireIntentExists("none") })},
			},
			want: []wantResult{
				{added: []string{"/a"}},
				{added: []string{"/a/b"}},
				{err: ErrExists},
				{added: []string{"/c"}},
				{},
				{},
				{},
				{added: []string{"/d"}, removed: []string{"/a/b"}},
				{},
				{err: ErrInvalid},
				{err: ErrNotFound},
			},
			applied: 11,
			exist:   []string{"/a", "/c", "/d"},
			absent:  []string{"/a/b", "/x", "/e"},
		},
		{
			// An inode a precondition found absent is written without a
			// second read: the counts and changes must still be right.
			name: "inodes found absent, then written",
			entries: []LogEntry{
				{1, batch(func(b *Batch) { b.RequireInodeAbsent("/p"); b.PutInode("/p", file) })},
				{2, batch(func(b *Batch) {
					b.RequireInodeAbsent("/q")
					b.PutInode("/q", file)
					b.DeleteInode("/q")
					b.PutInode("/q", Inode{Type: TypeDir})
				})},
				{3, batch(func(b *Batch) { b.RequireInodeAbsent("/r"); b.DeleteInode("/r") })},
				{4, batch(func(b *Batch) { b.RequireInodeAbsent("/p"); b.PutInode("/s", file) })},
				{5, batch(func(b *Batch) { b.RequireInodeAbsent("/t"); b.PutInode("/p", Inode{Type: TypeDir}) })},
			},
			want: []wantResult{
				{added: []string{"/p"}},
				{added: []string{"/q"}},
				{},
				{err: ErrExists},
				{},
			},
			applied: 5,
			exist:   []string{"/p", "/q"},
			absent:  []string{"/r", "/s", "/t"},
		},
		{
			name:    "entries at or below the applied index are skipped",
			before:  creates(1, 3),
			entries: creates(2, 4),
			want:    []wantResult{{skipped: true}, {skipped: true}, {added: []string{"/s4"}}, {added: []string{"/s5"}}},
			applied: 5,
			exist:   []string{"/s1", "/s2", "/s3", "/s4", "/s5"},
		},
		{
			name:    "all skipped",
			before:  creates(1, 3),
			entries: creates(1, 2),
			want:    []wantResult{{skipped: true}, {skipped: true}},
			applied: 3,
			same:    true,
		},
		{
			name:    "indexes need not be contiguous",
			entries: []LogEntry{{10, createBatch("/g", TypeDir, "n")}, {20, nil}, {25, createBatch("/g/h", TypeFile, "n")}},
			want:    []wantResult{{added: []string{"/g"}}, {}, {added: []string{"/g/h"}}},
			applied: 25,
		},
		{name: "no entries", entries: nil, want: nil, applied: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, testOptions(t))
			if c.before != nil {
				if _, err := s.ApplyLog(ctx, c.before); err != nil {
					t.Fatal(err)
				}
			}
			before := dump(t, s)
			res, err := s.ApplyLog(ctx, c.entries)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != len(c.want) {
				t.Fatalf("%d results for %d entries", len(res), len(c.want))
			}
			for i, w := range c.want {
				r := res[i]
				if r.Index != c.entries[i].Index || r.Skipped != w.skipped ||
					!slices.Equal(r.Added, w.added) || !slices.Equal(r.Removed, w.removed) ||
					(w.err == nil) != (r.Err == nil) || (w.err != nil && !errors.Is(r.Err, w.err)) {
					t.Errorf("entry %d: got %+v, want %+v", c.entries[i].Index, r, w)
				}
			}
			mustApplied(t, s, c.applied)
			for _, p := range c.exist {
				if _, err := s.GetInode(ctx, p); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
			for _, p := range c.absent {
				if _, err := s.GetInode(ctx, p); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s: %v, want ErrNotFound", p, err)
				}
			}
			checkCounts(t, s)
			if c.same {
				diffDumps(t, dump(t, s), before)
			}
		})
	}
}

func TestApplyLogRefusesBadIndexes(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	for _, idx := range [][]uint64{{0}, {3, 3}, {5, 4}, {1, 2, 2}} {
		var entries []LogEntry
		for _, i := range idx {
			entries = append(entries, LogEntry{Index: i, Batch: createBatch(fmt.Sprintf("/f%d", i), TypeFile, "n")})
		}
		if _, err := s.ApplyLog(ctx, entries); !errors.Is(err, ErrInvalid) {
			t.Errorf("indexes %v: %v, want ErrInvalid", idx, err)
		}
	}
	mustApplied(t, s, 0)
	if c := checkCounts(t, s); c.Total() != 0 {
		t.Errorf("something was applied: %+v", c)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.ApplyLog(cctx, testEntries(1, 1, 0)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
	s.Close()
	if _, err := s.ApplyLog(ctx, testEntries(1, 1, 0)); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// TestApplyLogSplits applies a group larger than one Badger transaction,
// with an entry too large for any: the group is split, every transaction
// records the index of its last entry together with exactly the effects of
// the entries up to it, and the too-large entry is applied as an error.
func TestApplyLogSplits(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	entries := testEntries(1, 40, 100<<10)
	var huge Batch
	for j := range 16 {
		huge.PutInode(fmt.Sprintf("/huge/f%02d", j), Inode{Type: TypeFile, Layout: make([]byte, 100<<10)})
	}
	entries = slices.Insert(entries, 20, LogEntry{Index: 21, Batch: &huge})
	for i := 21; i < len(entries); i++ {
		var b Batch
		p := testEntryPath(i + 1)
		b.PutInode(p, Inode{Type: TypeFile, Layout: make([]byte, 100<<10)})
		entries[i] = LogEntry{Index: uint64(i + 1), Batch: &b}
	}
	var txns []uint64
	s.applyHook = func(applied uint64) error {
		txns = append(txns, applied)
		// What is on disk now: the index, and the effects of exactly the
		// entries up to it.
		return s.db.View(func(txn *badger.Txn) error {
			if got, err := readApplied(txn); err != nil || got != applied {
				return fmt.Errorf("applied record %d (%v) after a transaction up to %d", got, err, applied)
			}
			for _, e := range entries {
				// Skip the huge entry, those that fail, and those that a
				// later entry deletes again.
				if e.Index == 21 || e.Index%5 == 0 && e.Index < 21 || e.Index%7 == 4 && e.Index+3 <= 20 {
					continue
				}
				_, err := txn.Get(inodeKey(testEntryPath(int(e.Index))))
				if present := err == nil; present != (e.Index <= applied) {
					return fmt.Errorf("after a transaction up to %d: entry %d present = %v", applied, e.Index, present)
				}
			}
			return nil
		})
	}
	res, err := s.ApplyLog(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("txn limit %d bytes; %d entries in %d transactions ending at %v", s.db.MaxBatchSize(), len(entries), len(txns), txns)
	if len(txns) < 4 || txns[len(txns)-1] != 41 {
		t.Errorf("transactions ending at %v: want at least 4, the last at 41", txns)
	}
	for _, r := range res {
		switch {
		case r.Index == 21:
			if !errors.Is(r.Err, ErrTooLarge) {
				t.Errorf("huge entry: %v, want ErrTooLarge", r.Err)
			}
		case r.Index%5 == 0 && r.Index < 21:
			if !errors.Is(r.Err, ErrNotFound) {
				t.Errorf("entry %d: %v, want ErrNotFound", r.Index, r.Err)
			}
		case r.Err != nil || r.Skipped || len(r.Added) != 1:
			t.Errorf("entry %d: %+v", r.Index, r)
		}
	}
	if st := s.Stats(); st.LogEntries != 41 || st.LogTxns != uint64(len(txns)) || st.Txns != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	mustApplied(t, s, 41)
	checkCounts(t, s)
	if _, err := s.GetInode(ctx, "/huge/f00"); !errors.Is(err, ErrNotFound) {
		t.Errorf("part of the too-large entry was applied: %v", err)
	}
}

func TestRekeyPrefixAt(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, rekeyOptions(t))
	buildFixture(t, s)
	before := dump(t, s)
	moved := map[string]string{}
	res, err := s.RekeyPrefixAt(ctx, 5, "/src", "/dst/moved", nil, func(o, n string) { moved[o] = n })
	if err != nil || res.Err != nil || res.Skipped || res.Index != 5 {
		t.Fatalf("RekeyPrefixAt = %+v, %v", res, err)
	}
	want := expectRekey(before, "/src", "/dst/moved")
	want[string(sysAppliedKey)] = string(encodeApplied(5))
	diffDumps(t, dump(t, s), want)
	if n := 1 + fixtureDirs*(1+fixtureFiles); len(moved) != n || moved["/src/d03/f 007"] != "/dst/moved/d03/f 007" {
		t.Errorf("onMoved told about %d inodes, want %d", len(moved), n)
	}
	mustApplied(t, s, 5)
	checkCounts(t, s)

	// Replayed: skipped, whatever it says.
	for _, idx := range []uint64{5, 4} {
		res, err := s.RekeyPrefixAt(ctx, idx, "/dst/moved", "/elsewhere", nil, nil)
		if err != nil || !res.Skipped || res.Err != nil {
			t.Errorf("replayed rekey at %d: %+v, %v", idx, res, err)
		}
	}
	diffDumps(t, dump(t, s), want)

	// A rekey interrupted after its start, as by a crash: the index is
	// applied, the rekey pending until ResumeRekey.
	crash := errors.New("simulated crash")
	s.rekeyHook = func(step int) error {
		if step == 3 {
			return crash
		}
		return nil
	}
	if _, err := s.RekeyPrefixAt(ctx, 8, "/dst/moved", "/m2", nil, nil); !errors.Is(err, crash) {
		t.Fatalf("interrupted rekey: %v", err)
	}
	s.rekeyHook = nil
	mustApplied(t, s, 8)

	// Refusals are applied entries with an error result.
	refusals := []struct {
		index    uint64
		old, new string
		want     error
	}{
		{9, "/src b", "/srcx", ErrExists},         // destination not empty
		{10, "/m2/d01", "/z", ErrConflict},        // overlaps the pending rekey
		{11, "/", "/x", ErrInvalid},               // the root
		{12, "/a", "/a/b", ErrInvalid},            // one inside the other
		{13, "relative", "/x", ErrInvalid},        // bad path
		{14, "/other", "/dst/moved", ErrConflict}, // the pending rekey's source
	}
	for _, r := range refusals {
		snap := dump(t, s)
		res, err := s.RekeyPrefixAt(ctx, r.index, r.old, r.new, nil, nil)
		if err != nil || res.Skipped || !errors.Is(res.Err, r.want) {
			t.Errorf("rekey %s -> %s: %+v, %v; want result %v", r.old, r.new, res, err, r.want)
		}
		mustApplied(t, s, r.index)
		delete(snap, string(sysAppliedKey))
		after := dump(t, s)
		delete(after, string(sysAppliedKey))
		diffDumps(t, after, snap)
	}
	if _, err := s.RekeyPrefixAt(ctx, 0, "/a", "/b", nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("index 0: %v", err)
	}

	// ResumeRekey finishes the interrupted one; later entries apply.
	if err := s.ResumeRekey(ctx, nil); err != nil {
		t.Fatal(err)
	}
	want = expectRekey(before, "/src", "/m2")
	want[string(sysAppliedKey)] = string(encodeApplied(14))
	diffDumps(t, dump(t, s), want)
	res2, err := s.ApplyLog(ctx, []LogEntry{{14, createBatch("/late", TypeFile, "n")}, {15, createBatch("/m2/x", TypeFile, "n")}})
	if err != nil || !res2[0].Skipped || res2[1].Err != nil {
		t.Fatalf("ApplyLog after rekeys: %+v, %v", res2, err)
	}
	mustApplied(t, s, 15)
	checkCounts(t, s)
}
