package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func TestSentinelErrors(t *testing.T) {
	cases := []struct {
		err, target error
	}{
		{ErrNotFound, fs.ErrNotExist}, {ErrExists, fs.ErrExist}, {ErrInvalid, fs.ErrInvalid}, {ErrClosed, fs.ErrClosed},
		{fmt.Errorf("wrapped: %w", ErrNotFound), fs.ErrNotExist},
		{&PreconditionError{Err: ErrExists}, fs.ErrExist},
		{&PreconditionError{Err: ErrExists}, ErrExists},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.target) {
			t.Errorf("errors.Is(%v, %v) = false", c.err, c.target)
		}
	}
	if errors.Is(ErrNotFound, fs.ErrExist) || errors.Is(ErrExists, ErrNotFound) || errors.Is(ErrConflict, fs.ErrExist) {
		t.Error("sentinels match the wrong targets")
	}
}

func TestOpenValidates(t *testing.T) {
	if _, err := Open(context.Background(), Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open without Dir: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, Options{Dir: t.TempDir()}); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with cancelled ctx: %v", err)
	}
}

func TestInodeRoundTripThroughStore(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Inode{}
	for i, ino := range inodeCases {
		p := fmt.Sprintf("/dir/f%d", i)
		var b Batch
		b.PutInode(p, ino)
		mustCommit(t, s, &b)
		want[p] = ino
	}
	check := func(s *Store) {
		for p, w := range want {
			got, err := s.GetInode(ctx, p)
			if err != nil || !reflect.DeepEqual(got, w) {
				t.Errorf("GetInode(%q) = %+v, %v; want %+v", p, got, err, w)
			}
		}
		if _, err := s.GetInode(ctx, "/dir/none"); !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing inode: %v", err)
		}
		if _, err := s.GetInode(ctx, "rel"); !errors.Is(err, ErrInvalid) {
			t.Errorf("invalid path: %v", err)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	check(s)

	got, err := s.GetInodes(ctx, []string{"/dir/f0", "/nope", "/dir/f2"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == nil || got[1] != nil || got[2] == nil || !reflect.DeepEqual(*got[2], inodeCases[2]) {
		t.Errorf("GetInodes = %v", got)
	}
	var b Batch
	b.DeleteInode("/dir/f0")
	b.DeleteInode("/dir/never-existed")
	mustCommit(t, s, &b)
	if _, err := s.GetInode(ctx, "/dir/f0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted inode: %v", err)
	}
	checkCounts(t, s)
}

func TestPreconditions(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	// Fixture: /d (dir, version 3) with entry "f"; /e (empty dir); intent i1; meta m=v.
	var b Batch
	b.PutInode("/d", Inode{Type: TypeDir, Version: 3})
	b.PutInode("/e", Inode{Type: TypeDir})
	b.PutEntry("/d", Entry{Name: "f", Type: TypeFile, Home: "n1"})
	b.PutIntent("i1", []byte("x"))
	b.SetMeta("m", []byte("v"))
	mustCommit(t, s, &b)

	cases := []struct {
		name string
		add  func(b *Batch)
		want error // nil: must succeed
	}{
		{"inode absent ok", func(b *Batch) { b.RequireInodeAbsent("/x") }, nil},
		{"inode absent fails", func(b *Batch) { b.RequireInodeAbsent("/d") }, ErrExists},
		{"inode exists ok", func(b *Batch) { b.RequireInodeExists("/d") }, nil},
		{"inode exists fails", func(b *Batch) { b.RequireInodeExists("/x") }, ErrNotFound},
		{"version ok", func(b *Batch) { b.RequireInodeVersion("/d", 3) }, nil},
		{"version mismatch", func(b *Batch) { b.RequireInodeVersion("/d", 4) }, ErrConflict},
		{"version of missing", func(b *Batch) { b.RequireInodeVersion("/x", 0) }, ErrNotFound},
		{"entry absent ok", func(b *Batch) { b.RequireEntryAbsent("/d", "g") }, nil},
		{"entry absent fails", func(b *Batch) { b.RequireEntryAbsent("/d", "f") }, ErrExists},
		{"entry exists ok", func(b *Batch) { b.RequireEntryExists("/d", "f") }, nil},
		{"entry exists fails", func(b *Batch) { b.RequireEntryExists("/d", "g") }, ErrNotFound},
		{"dir empty ok", func(b *Batch) { b.RequireDirEmpty("/e") }, nil},
		{"dir empty of missing dir ok", func(b *Batch) { b.RequireDirEmpty("/d/f") }, nil},
		{"dir empty fails", func(b *Batch) { b.RequireDirEmpty("/d") }, ErrNotEmpty},
		{"intent absent ok", func(b *Batch) { b.RequireIntentAbsent("i2") }, nil},
		{"intent absent fails", func(b *Batch) { b.RequireIntentAbsent("i1") }, ErrExists},
		{"intent exists fails", func(b *Batch) { b.RequireIntentExists("i2") }, ErrNotFound},
		{"meta equals ok", func(b *Batch) { b.RequireMeta("m", []byte("v")) }, nil},
		{"meta absent ok", func(b *Batch) { b.RequireMeta("other", nil) }, nil},
		{"meta differs", func(b *Batch) { b.RequireMeta("m", []byte("w")) }, ErrConflict},
		{"meta absent fails", func(b *Batch) { b.RequireMeta("m", nil) }, ErrConflict},
		{"meta empty vs absent", func(b *Batch) { b.RequireMeta("other", []byte{}) }, ErrConflict},
		{"second of two fails", func(b *Batch) { b.RequireInodeExists("/d"); b.RequireEntryExists("/d", "zz") }, ErrNotFound},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			marker := fmt.Sprintf("/marker%d", i)
			var b Batch
			c.add(&b)
			b.PutInode(marker, Inode{Type: TypeFile})
			b.DeleteEntry("/d", "f") // must not happen on failure
			err := s.Commit(ctx, &b)
			_, gerr := s.GetInode(ctx, marker)
			if c.want == nil {
				if err != nil || gerr != nil {
					t.Fatalf("Commit = %v, marker: %v", err, gerr)
				}
				// restore the fixture entry
				var r Batch
				r.PutEntry("/d", Entry{Name: "f", Type: TypeFile, Home: "n1"})
				mustCommit(t, s, &r)
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Commit = %v, want %v", err, c.want)
			}
			var pe *PreconditionError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *PreconditionError", err)
			}
			if !errors.Is(gerr, ErrNotFound) {
				t.Errorf("failed batch applied its inode: %v", gerr)
			}
			if _, err := s.GetEntry(ctx, "/d", "f"); err != nil {
				t.Errorf("failed batch deleted the entry: %v", err)
			}
		})
	}
	if !errors.Is(func() error {
		var b Batch
		b.RequireInodeAbsent("/d")
		return s.Commit(ctx, &b)
	}(), fs.ErrExist) {
		t.Error("ErrExists does not match fs.ErrExist through a PreconditionError")
	}
	checkCounts(t, s)
}

func TestInvalidBatch(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	long := strings.Repeat("x", MaxNameLen+1)
	cases := map[string]func(b *Batch){
		"relative path":    func(b *Batch) { b.PutInode("a/b", Inode{Type: TypeFile}) },
		"unclean path":     func(b *Batch) { b.PutInode("/a/../b", Inode{Type: TypeFile}) },
		"nul in path":      func(b *Batch) { b.DeleteInode("/a\x00") },
		"bad type":         func(b *Batch) { b.PutInode("/a", Inode{}) },
		"big layout":       func(b *Batch) { b.PutInode("/a", Inode{Type: TypeFile, Layout: make([]byte, MaxBlobLen+1)}) },
		"slash in name":    func(b *Batch) { b.PutEntry("/", Entry{Name: "a/b", Type: TypeFile, Home: "n"}) },
		"dotdot name":      func(b *Batch) { b.RequireEntryAbsent("/", "..") },
		"long name":        func(b *Batch) { b.DeleteEntry("/", long) },
		"empty home":       func(b *Batch) { b.PutEntry("/", Entry{Name: "a", Type: TypeFile}) },
		"entry type":       func(b *Batch) { b.PutEntry("/", Entry{Name: "a", Home: "n"}) },
		"empty intent id":  func(b *Batch) { b.PutIntent("", nil) },
		"empty meta key":   func(b *Batch) { b.SetMeta("", nil) },
		"dir empty of rel": func(b *Batch) { b.RequireDirEmpty("x") },
	}
	for name, add := range cases {
		t.Run(name, func(t *testing.T) {
			var b Batch
			b.PutInode("/ok", Inode{Type: TypeFile})
			add(&b)
			b.PutInode("/ok2", Inode{Type: TypeFile})
			if !errors.Is(b.Err(), ErrInvalid) {
				t.Errorf("Err() = %v", b.Err())
			}
			if err := s.Commit(ctx, &b); !errors.Is(err, ErrInvalid) || !errors.Is(err, fs.ErrInvalid) {
				t.Errorf("Commit = %v, want ErrInvalid", err)
			}
			if _, err := s.GetInode(ctx, "/ok"); !errors.Is(err, ErrNotFound) {
				t.Errorf("invalid batch was applied: %v", err)
			}
			b.Reset()
			if b.Err() != nil || b.Len() != 0 {
				t.Errorf("Reset left %v, %d", b.Err(), b.Len())
			}
		})
	}
	if err := s.Commit(ctx, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil batch: %v", err)
	}
	if err := s.Commit(ctx, &Batch{}); err != nil {
		t.Errorf("empty batch: %v", err)
	}
}

// trickyNames collide on prefixes, sort around '/' (0x2f) and ' ' (0x20),
// and use multi-byte UTF-8.
var trickyNames = []string{
	"a", "a b", "a!", "a-", "a.", "a0", "aa", "a\u00e9", "b", "B", "\u00e9", "\u65e5\u672c",
	"\U0001F600", " lead", "trail ", "...", "x\ty", strings.Repeat("z", MaxNameLen), "0", "~",
}

func TestReadDirOrderAndPagination(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	dirs := []string{"/a", "/a b", "/a/b", "/a!", "/ab", "/"}
	for _, d := range dirs {
		var b Batch
		for _, n := range trickyNames {
			b.PutEntry(d, Entry{Name: n, Type: TypeFile, Home: "home-of-" + d})
		}
		mustCommit(t, s, &b)
	}
	want := slices.Clone(trickyNames)
	sort.Strings(want)
	for _, d := range dirs {
		all, more, err := s.ReadDir(ctx, d, "", 0)
		if err != nil || more {
			t.Fatalf("ReadDir(%q) more=%v err=%v", d, more, err)
		}
		var names []string
		for _, e := range all {
			names = append(names, e.Name)
			if e.Home != "home-of-"+d || e.Type != TypeFile {
				t.Errorf("dir %q: entry %+v from another directory", d, e)
			}
		}
		if !slices.Equal(names, want) {
			t.Fatalf("ReadDir(%q) names = %q, want %q", d, names, want)
		}
		for _, limit := range []int{1, 2, 3, 7, len(want) - 1, len(want), len(want) + 1} {
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				page, more, err := s.ReadDir(ctx, d, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit || (more && len(page) != limit) {
					t.Fatalf("limit %d: page of %d, more=%v", limit, len(page), more)
				}
				for _, e := range page {
					got = append(got, e.Name)
				}
				if !more {
					break
				}
				after = page[len(page)-1].Name
				if pages > len(want) {
					t.Fatal("pagination does not end")
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("dir %q limit %d: got %q", d, limit, got)
			}
		}
	}
	// after a name that is not present starts at the next larger one.
	page, _, err := s.ReadDir(ctx, "/a", "a a", 2)
	if err != nil || len(page) != 2 || page[0].Name != "a b" || page[1].Name != "a!" {
		t.Errorf("ReadDir after absent name = %+v, %v", page, err)
	}
	// Directories without entries and bad arguments.
	if page, more, err := s.ReadDir(ctx, "/a/b/c", "", 10); err != nil || more || len(page) != 0 {
		t.Errorf("empty dir: %v %v %v", page, more, err)
	}
	if _, _, err := s.ReadDir(ctx, "/a", "x/y", 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad after: %v", err)
	}
	e, err := s.GetEntry(ctx, "/a b", "\u65e5\u672c")
	if err != nil || e.Home != "home-of-/a b" {
		t.Errorf("GetEntry = %+v, %v", e, err)
	}
	if _, err := s.GetEntry(ctx, "/a b", "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("GetEntry missing: %v", err)
	}
}

func TestIntentsAndMeta(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	for _, id := range []string{"op-2", "op-10", "op-1"} {
		if err := s.PutIntent(ctx, id, []byte("payload "+id)); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListIntents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range list {
		ids = append(ids, in.ID)
		if string(in.Payload) != "payload "+in.ID || in.Created == 0 {
			t.Errorf("intent %+v", in)
		}
	}
	if !slices.Equal(ids, []string{"op-1", "op-10", "op-2"}) {
		t.Errorf("ListIntents ids = %q", ids)
	}
	if in, err := s.GetIntent(ctx, "op-10"); err != nil || string(in.Payload) != "payload op-10" {
		t.Errorf("GetIntent = %+v, %v", in, err)
	}
	if err := s.DeleteIntent(ctx, "op-10"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetIntent(ctx, "op-10"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted intent: %v", err)
	}
	if err := s.DeleteIntent(ctx, "op-10"); err != nil {
		t.Errorf("deleting a missing intent: %v", err)
	}

	if _, err := s.GetMeta(ctx, "applied"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing meta: %v", err)
	}
	if err := s.SetMeta(ctx, "applied", []byte{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetMeta(ctx, "applied"); err != nil || !bytes.Equal(v, []byte{0, 1, 2}) {
		t.Errorf("GetMeta = %v, %v", v, err)
	}
	// Apply-once pattern: compare-and-set of an applied index.
	var b Batch
	b.RequireMeta("applied", []byte{0, 1, 2})
	b.SetMeta("applied", []byte{3})
	b.DeleteIntent("op-1")
	mustCommit(t, s, &b)
	if err := s.Commit(ctx, &b); !errors.Is(err, ErrConflict) {
		t.Errorf("second apply: %v", err)
	}
	b.Reset()
	b.DeleteMeta("applied")
	mustCommit(t, s, &b)
	if _, err := s.GetMeta(ctx, "applied"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted meta: %v", err)
	}
}

func TestCountsAndScan(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		typ := TypeFile
		if i%5 == 0 {
			typ = TypeDir
		}
		mustCommit(t, s, createBatch(fmt.Sprintf("/c/n%02d", i), typ, "n1"))
	}
	if c := checkCounts(t, s); c != (InodeCounts{Files: 40, Dirs: 10}) {
		t.Fatalf("counts %+v", c)
	}
	// Replace a dir by a file, put over an existing file, delete, delete missing.
	var b Batch
	b.PutInode("/c/n00", Inode{Type: TypeFile})
	b.PutInode("/c/n01", Inode{Type: TypeFile, Size: 9})
	b.DeleteInode("/c/n02")
	b.DeleteInode("/c/n02")
	b.DeleteInode("/c/zzz")
	mustCommit(t, s, &b)
	if c := checkCounts(t, s); c != (InodeCounts{Files: 40, Dirs: 9}) {
		t.Fatalf("counts %+v", c)
	}
	// Scan order and early stop.
	var paths []string
	stop := errors.New("stop")
	err = s.ScanInodes(ctx, func(p string, _ Inode) error {
		paths = append(paths, p)
		if len(paths) == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || len(paths) != 10 || !slices.IsSorted(paths) {
		t.Errorf("ScanInodes stop: %v, %q", err, paths)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: counts persisted. Then drop the counts record: rebuilt by scan.
	s, err = Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c := checkCounts(t, s); c != (InodeCounts{Files: 40, Dirs: 9}) || c.Total() != 49 {
		t.Fatalf("counts after reopen %+v", c)
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(sysCountsKey) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	if c := checkCounts(t, s); c != (InodeCounts{Files: 40, Dirs: 9}) {
		t.Fatalf("rebuilt counts %+v", c)
	}
}

func TestScanInodesUnder(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	all := []string{"/", "/a", "/a b", "/a!", "/a/b", "/a/b/c", "/ab", "/b"}
	var b Batch
	for _, p := range all {
		b.PutInode(p, Inode{Type: TypeDir})
	}
	mustCommit(t, s, &b)
	for root, want := range map[string][]string{
		"/a":   {"/a", "/a/b", "/a/b/c"},
		"/a/b": {"/a/b", "/a/b/c"},
		"/zz":  nil,
		"/":    {"/", "/a", "/a b", "/a!", "/a/b", "/a/b/c", "/ab", "/b"},
	} {
		var got []string
		err := s.ScanInodesUnder(ctx, root, func(p string, _ Inode) error { got = append(got, p); return nil })
		if err != nil {
			t.Fatal(err)
		}
		// Byte order: "/a b" < "/a!" < "/a/b" ...
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("under %q: %q, want %q", root, got, want)
		}
	}
}

func TestSchemaVersionChecked(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(sysSchemaKey, []byte{formatV1, 99}) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(ctx, opts); err == nil || !strings.Contains(err.Error(), "schema version 99") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open with schema 99: %v", err)
	}
}

// recordHandler keeps the records it is given.
type recordHandler struct {
	mu    sync.Mutex
	level slog.Level
	recs  []slog.Record
	attrs []slog.Attr
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attrs = append(h.attrs, as...)
	return h
}
func (h *recordHandler) WithGroup(string) slog.Handler { return h }

func TestLogging(t *testing.T) {
	ctx := context.Background()
	// At Info, only the store's own lines appear (Badger's INFO is Debug).
	h := &recordHandler{level: slog.LevelInfo}
	opts := testOptions(t)
	opts.Logger = slog.New(h).With("node", "n7")
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, r := range h.recs {
		msgs = append(msgs, r.Message)
	}
	if !slices.Equal(msgs, []string{"store opened", "store closed"}) {
		t.Errorf("Info records = %q", msgs)
	}
	// At Debug, Badger's lines are routed too.
	h = &recordHandler{level: slog.LevelDebug}
	opts.Logger = slog.New(h)
	s, err = Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(h.recs) <= 2 {
		t.Errorf("no Badger records at Debug: %d records", len(h.recs))
	}
	var hasBadger bool
	for _, a := range h.attrs {
		hasBadger = hasBadger || a.Key == "badger"
	}
	if !hasBadger {
		t.Errorf("badger attribute missing: %v", h.attrs)
	}
}

// TestScanInodesAfter resumes a scan after every path it passed and
// checks that each resumed scan yields exactly the rest.
func TestScanInodesAfter(t *testing.T) {
	s := openStore(t, testOptions(t))
	ctx := context.Background()
	paths := []string{"/", "/a", "/a b", "/a/x", "/a/x/y", "/a/z", "/b"}
	var b Batch
	for _, p := range paths {
		b.PutInode(p, Inode{Type: TypeDir, Mode: 0o755})
	}
	if err := s.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{"/", "/a"} {
		var all []string
		if err := s.ScanInodesAfter(ctx, root, "", func(p string, _ Inode) error { all = append(all, p); return nil }); err != nil {
			t.Fatal(err)
		}
		for i, after := range all {
			var rest []string
			if err := s.ScanInodesAfter(ctx, root, after, func(p string, _ Inode) error { rest = append(rest, p); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rest, all[i+1:]) {
				t.Errorf("root %s after %s: %v, want %v", root, after, rest, all[i+1:])
			}
		}
		if root == "/a" && !slices.Equal(all, []string{"/a", "/a/x", "/a/x/y", "/a/z"}) {
			t.Errorf("scan of /a: %v", all)
		}
	}
}

// TestEntriesExist: one answer per name, in order; a bad name or directory
// is refused as GetEntry refuses it.
func TestEntriesExist(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	for _, p := range []string{"/d", "/d/a", "/d/c"} {
		typ := TypeFile
		if p == "/d" {
			typ = TypeDir
		}
		if err := s.Commit(ctx, createBatch(p, typ, "n")); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.EntriesExist(ctx, "/d", []string{"a", "b", "c", "a"})
	if err != nil || !slices.Equal(got, []bool{true, false, true, true}) {
		t.Errorf("EntriesExist(/d, a b c a) = %v, %v; want [true false true true]", got, err)
	}
	if got, err := s.EntriesExist(ctx, "/none", []string{"a"}); err != nil || !slices.Equal(got, []bool{false}) {
		t.Errorf("EntriesExist(/none, a) = %v, %v; want [false]", got, err)
	}
	for _, tc := range []struct{ dir, name string }{{"/d", "x/y"}, {"/d", ""}, {"d", "a"}} {
		if _, err := s.EntriesExist(ctx, tc.dir, []string{tc.name}); !errors.Is(err, ErrInvalid) {
			t.Errorf("EntriesExist(%q, %q): %v, want ErrInvalid", tc.dir, tc.name, err)
		}
	}
}

// TestListIntentsPrefix pages through the intents of one prefix only.
func TestListIntentsPrefix(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	for _, id := range []string{"a/1", "t/1", "t/2", "t/3", "u/1", "t", "s/9"} {
		if err := s.PutIntent(ctx, id, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	idsOf := func(ins []Intent) []string {
		var out []string
		for _, in := range ins {
			out = append(out, in.ID)
		}
		return out
	}
	for _, tc := range []struct {
		prefix, after string
		limit         int
		want          []string
	}{
		{"t/", "", 0, []string{"t/1", "t/2", "t/3"}},
		{"t/", "", 2, []string{"t/1", "t/2"}},
		{"t/", "t/2", 2, []string{"t/3"}},
		{"t/", "t/3", 0, nil},
		{"t/", "a", 0, []string{"t/1", "t/2", "t/3"}}, // an after below the prefix: from its start
		{"x/", "", 0, nil},
		{"", "t/3", 2, []string{"u/1"}},
	} {
		got, err := s.ListIntentsPrefix(ctx, tc.prefix, tc.after, tc.limit)
		if err != nil || !slices.Equal(idsOf(got), tc.want) {
			t.Errorf("ListIntentsPrefix(%q, %q, %d) = %q, %v; want %q", tc.prefix, tc.after, tc.limit, idsOf(got), err, tc.want)
		}
	}
}
