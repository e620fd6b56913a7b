package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
)

const (
	fixtureDirs  = 30
	fixtureFiles = 100
)

// buildFixture creates the subtree /src (30 directories of 100 files, so
// 3,031 inodes and 3,030 entries) plus neighbours whose names collide with
// it ("/src b", "/src!", "/srcx", "/src" entry in "/"), and "/dst".
func buildFixture(t testing.TB, s *Store) {
	t.Helper()
	var b Batch
	for _, d := range []string{"/", "/src", "/src b", "/src!", "/srcx", "/dst", "/other"} {
		b.PutInode(d, Inode{Type: TypeDir, Mode: 0o755, Version: 1})
		if d != "/" {
			b.PutEntry("/", Entry{Name: d[1:], Type: TypeDir, Home: "n1"})
		}
	}
	for _, d := range []string{"/src b", "/src!", "/srcx"} {
		b.PutEntry(d, Entry{Name: "keep", Type: TypeFile, Home: "n2"})
		b.PutInode(d+"/keep", Inode{Type: TypeFile, Size: 1})
	}
	b.PutIntent("rename-1", []byte("/src -> /dst/moved"))
	mustCommit(t, s, &b)
	for i := range fixtureDirs {
		b.Reset()
		dir := fmt.Sprintf("/src/d%02d", i)
		b.PutInode(dir, Inode{Type: TypeDir, Mode: 0o700, Version: uint64(i)})
		b.PutEntry("/src", Entry{Name: dir[5:], Type: TypeDir, Home: "n1"})
		for j := range fixtureFiles {
			name := fmt.Sprintf("f %03d", j)
			b.PutInode(dir+"/"+name, Inode{Type: TypeFile, Size: int64(j), Layout: []byte(dir), Version: uint64(j)})
			b.PutEntry(dir, Entry{Name: name, Type: TypeFile, Home: fmt.Sprintf("n%d", j%3)})
		}
		mustCommit(t, s, &b)
	}
}

// expectRekey returns the dump expected after moving old to new.
func expectRekey(before map[string]string, old, nw string) map[string]string {
	out := map[string]string{}
	for k, v := range before {
		kb := []byte(k)
		under := false
		switch kb[0] {
		case pfxInode:
			under = isUnder(k[1:], old)
		case pfxEntry:
			dir, _, _ := parseEntryKey(kb)
			under = isUnder(dir, old)
		}
		if under {
			k = string(rekeyed(kb, old, nw))
		}
		out[k] = v
	}
	return out
}

func diffDumps(t *testing.T, got, want map[string]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	n := 0
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] && n < 10 {
			t.Errorf("key %q: got %q, want %q", k, got[k], want[k])
			n++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok && n < 20 {
			t.Errorf("unexpected key %q", k)
			n++
		}
	}
	t.Fatalf("state differs (%d keys vs %d expected)", len(got), len(want))
}

func rekeyOptions(t testing.TB) Options {
	opts := testOptions(t)
	opts.RekeyStepKeys = 100
	return opts
}

func TestRekeyPrefix(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, rekeyOptions(t))
	buildFixture(t, s)
	before := dump(t, s)
	counts := checkCounts(t, s)

	moved := map[string]string{}
	err := s.RekeyPrefix(ctx, "/src", "/dst/moved", nil, func(o, n string) {
		if _, dup := moved[o]; dup {
			t.Errorf("%s reported twice", o)
		}
		moved[o] = n
	})
	if err != nil {
		t.Fatal(err)
	}
	diffDumps(t, dump(t, s), expectRekey(before, "/src", "/dst/moved"))
	if want := 1 + fixtureDirs*(1+fixtureFiles); len(moved) != want {
		t.Errorf("onMoved told about %d inodes, want %d", len(moved), want)
	}
	if moved["/src/d07/f 042"] != "/dst/moved/d07/f 042" || moved["/src"] != "/dst/moved" {
		t.Errorf("onMoved mapping wrong: %q", moved["/src/d07/f 042"])
	}
	if c := checkCounts(t, s); c != counts {
		t.Errorf("counts %+v, want %+v", c, counts)
	}
	if p, err := s.PendingRekeys(ctx); err != nil || len(p) != 0 {
		t.Errorf("pending after finish: %v, %v", p, err)
	}
	page, more, err := s.ReadDir(ctx, "/dst/moved/d29", "", 3)
	if err != nil || !more || len(page) != 3 || page[0].Name != "f 000" {
		t.Errorf("ReadDir of moved dir: %+v %v %v", page, more, err)
	}
	ino, err := s.GetInode(ctx, "/dst/moved/d29/f 099")
	if err != nil || ino.Size != 99 || string(ino.Layout) != "/src/d29" {
		t.Errorf("moved inode: %+v, %v", ino, err)
	}
	// An empty subtree (nothing homed here) is fine and leaves nothing pending.
	if err := s.RekeyPrefix(ctx, "/nothing", "/still-nothing", nil, nil); err != nil {
		t.Errorf("empty rekey: %v", err)
	}
	// The same rekey again (a new leader finishing a directory rename
	// whose rekey entry was already applied) has nothing to move: a no-op,
	// though the destination is not empty.
	again := dump(t, s)
	if err := s.RekeyPrefix(ctx, "/src", "/dst/moved", nil, nil); err != nil {
		t.Errorf("the same rekey again: %v", err)
	}
	diffDumps(t, dump(t, s), again)
	// Moving back restores the original state exactly.
	if err := s.RekeyPrefix(ctx, "/dst/moved", "/src", nil, nil); err != nil {
		t.Fatal(err)
	}
	diffDumps(t, dump(t, s), before)
}

func TestRekeyRefusals(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, rekeyOptions(t))
	buildFixture(t, s)
	cases := []struct {
		old, nw string
		want    error
	}{
		{"/", "/x", ErrInvalid},
		{"/src", "/", ErrInvalid},
		{"/src", "/src/d00/x", ErrInvalid},
		{"/src/d00", "/src", ErrInvalid},
		{"/src", "src2", ErrInvalid},
		{"/src", "/dst", ErrExists},           // destination inode exists
		{"/src", "/src b", ErrExists},         // destination has entries and inodes below
		{"/src/d00", "/srcx/keep", ErrExists}, // inode at destination
	}
	for _, c := range cases {
		if err := s.RekeyPrefix(ctx, c.old, c.nw, nil, nil); !errors.Is(err, c.want) {
			t.Errorf("RekeyPrefix(%q, %q) = %v, want %v", c.old, c.nw, err, c.want)
		}
	}
	// A pending rekey blocks overlapping ones until resumed.
	crash := errors.New("crash")
	s.rekeyHook = func(step int) error {
		if step == 3 {
			return crash
		}
		return nil
	}
	if err := s.RekeyPrefix(ctx, "/src", "/dst/a", nil, nil); !errors.Is(err, crash) {
		t.Fatalf("hooked rekey: %v", err)
	}
	s.rekeyHook = nil
	for _, c := range [][2]string{{"/src/d01", "/elsewhere"}, {"/dst", "/y"}, {"/z", "/dst/a/b"}, {"/src", "/dst/b"}} {
		if err := s.RekeyPrefix(ctx, c[0], c[1], nil, nil); !errors.Is(err, ErrConflict) {
			t.Errorf("overlapping RekeyPrefix(%q, %q) = %v, want ErrConflict", c[0], c[1], err)
		}
	}
	if err := s.RekeyPrefix(ctx, "/srcx", "/srcy", nil, nil); err != nil {
		t.Errorf("disjoint rekey during a pending one: %v", err)
	}
	if err := s.ResumeRekey(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetInode(ctx, "/dst/a/d05/f 005"); err != nil {
		t.Errorf("resumed rekey incomplete: %v", err)
	}
}

// TestRekeyCrashResume interrupts the rekey after k steps (as a crash
// would: nothing more is written), closes and reopens the store, resumes,
// and requires the exact state of an uninterrupted rekey.
func TestRekeyCrashResume(t *testing.T) {
	ctx := context.Background()
	crash := errors.New("simulated crash")
	for _, k := range []int{0, 1, 2, 17, 45, 60} {
		t.Run(fmt.Sprintf("after-step-%d", k), func(t *testing.T) {
			opts := rekeyOptions(t)
			s, err := Open(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			buildFixture(t, s)
			want := expectRekey(dump(t, s), "/src", "/dst/moved")
			counts := checkCounts(t, s)
			steps := 0
			s.rekeyHook = func(step int) error {
				steps = step
				if step == k {
					return crash
				}
				return nil
			}
			movedBefore := 0
			err = s.RekeyPrefix(ctx, "/src", "/dst/moved", nil, func(string, string) { movedBefore++ })
			if !errors.Is(err, crash) {
				t.Fatalf("RekeyPrefix = %v after %d steps", err, steps)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			s = openStore(t, opts)
			pending, err := s.PendingRekeys(ctx)
			if err != nil || len(pending) != 1 || pending[0].Old != "/src" || pending[0].New != "/dst/moved" {
				t.Fatalf("PendingRekeys = %+v, %v", pending, err)
			}
			if c := checkCounts(t, s); c != counts {
				t.Errorf("counts mid-rekey %+v, want %+v", c, counts)
			}
			movedAfter := 0
			if err := s.ResumeRekey(ctx, func(string, string) { movedAfter++ }); err != nil {
				t.Fatal(err)
			}
			diffDumps(t, dump(t, s), want)
			if total := 1 + fixtureDirs*(1+fixtureFiles); movedBefore+movedAfter != total {
				t.Errorf("moved %d + %d inodes, want %d", movedBefore, movedAfter, total)
			}
			if p, _ := s.PendingRekeys(ctx); len(p) != 0 {
				t.Errorf("still pending: %+v", p)
			}
			if err := s.ResumeRekey(ctx, nil); err != nil {
				t.Errorf("second resume: %v", err)
			}
		})
	}
}

// TestRekeyLargeValues: a step whose values overflow one transaction is
// retried with a smaller bound instead of failing.
func TestRekeyLargeValues(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	var b Batch
	b.PutInode("/big", Inode{Type: TypeDir})
	mustCommit(t, s, &b)
	for _, f := range []struct {
		name string
		size int
	}{{"a", 300 << 10}, {"b", 990 << 10}, {"c", 990 << 10}, {"d", 10}} {
		b.Reset()
		b.PutInode("/big/"+f.name, Inode{Type: TypeFile, Layout: make([]byte, f.size)})
		b.PutEntry("/big", Entry{Name: f.name, Type: TypeFile, Home: "n"})
		mustCommit(t, s, &b)
	}
	want := expectRekey(dump(t, s), "/big", "/moved")
	if err := s.RekeyPrefix(ctx, "/big", "/moved", nil, nil); err != nil {
		t.Fatal(err)
	}
	diffDumps(t, dump(t, s), want)
	if st := s.Stats(); st.Failed != 1 {
		t.Errorf("want exactly one step too large (limit %d bytes) and retried; stats %+v", s.db.MaxBatchSize(), st)
	}
}
