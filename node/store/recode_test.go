package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestAncestorCodeHelpers(t *testing.T) {
	c := func(d, m, u uint32) AncestorCode { return AncestorCode{Depth: d, Mode: m, UID: u, GID: u} }
	for _, tc := range []struct {
		p    string
		want int
	}{{"/", 0}, {"/a", 1}, {"/a/b", 2}, {"/a b/c/d", 3}} {
		if got := PathDepth(tc.p); got != tc.want {
			t.Errorf("PathDepth(%q) = %d, want %d", tc.p, got, tc.want)
		}
	}
	open := Inode{Type: TypeDir, Mode: 0o755, UID: 5, GID: 5, Ancestors: []AncestorCode{c(0, 0o110, 0)}}
	if _, ok := SearchCode(2, &open); ok {
		t.Error("a 0755 directory restricts search")
	}
	if got := ChildAncestors(2, &open); !reflect.DeepEqual(got, open.Ancestors) {
		t.Errorf("child of an open directory: %v", got)
	}
	closed := Inode{Type: TypeDir, Mode: 0o4750, UID: 5, GID: 6, Ancestors: open.Ancestors}
	want := []AncestorCode{c(0, 0o110, 0), {Depth: 2, Mode: 0o110, UID: 5, GID: 6}}
	if got := ChildAncestors(2, &closed); !reflect.DeepEqual(got, want) {
		t.Errorf("child of a 4750 directory: %v, want %v", got, want)
	}

	codes := []AncestorCode{c(1, 0o100, 1), c(3, 0o100, 3)}
	for _, tc := range []struct {
		name  string
		depth uint32
		code  *AncestorCode
		want  []AncestorCode
	}{
		{"insert first", 0, &AncestorCode{Depth: 0}, []AncestorCode{{Depth: 0}, c(1, 0o100, 1), c(3, 0o100, 3)}},
		{"insert middle", 2, &AncestorCode{Depth: 2, Mode: 1}, []AncestorCode{c(1, 0o100, 1), {Depth: 2, Mode: 1}, c(3, 0o100, 3)}},
		{"insert last", 4, &AncestorCode{Depth: 4}, []AncestorCode{c(1, 0o100, 1), c(3, 0o100, 3), {Depth: 4}}},
		{"replace", 3, &AncestorCode{Depth: 3, UID: 9}, []AncestorCode{c(1, 0o100, 1), {Depth: 3, UID: 9}}},
		{"remove", 1, nil, []AncestorCode{c(3, 0o100, 3)}},
		{"remove absent", 2, nil, codes},
	} {
		if got := withCode(codes, tc.depth, tc.code); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("withCode %s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := withCode([]AncestorCode{c(1, 0, 0)}, 1, nil); got != nil {
		t.Errorf("removing the last code: %v, want nil", got)
	}

	// /a/b (depth 2) moves to /x (depth 1) whose chain is {0}: codes from
	// above /a/b are dropped, those of /a/b and below shift up by one.
	moved := movedCodes([]AncestorCode{c(1, 0, 1), c(2, 0, 2), c(4, 0, 4)}, []AncestorCode{c(0, 0o100, 0)}, 2, 1)
	if want := []AncestorCode{c(0, 0o100, 0), c(1, 0, 2), c(3, 0, 4)}; !reflect.DeepEqual(moved, want) {
		t.Errorf("movedCodes: %v, want %v", moved, want)
	}
}

// codesFixture creates /a, /a/b (0700, uid 7), /a/b/c, /a/b/c/f0..f(n-1)
// and /z, each with the codes a node would give it, in log entries from
// index 1; it returns the next index.
func codesFixture(t *testing.T, s *Store, n int) uint64 {
	t.Helper()
	ctx := context.Background()
	idx := uint64(1)
	put := func(p string, ino Inode) {
		var b Batch
		b.PutInode(p, ino)
		res, err := s.ApplyLog(ctx, []LogEntry{{Index: idx, Batch: &b}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("put %s: %v %v", p, err, res)
		}
		idx++
	}
	root := Inode{Type: TypeDir, Mode: 0o755}
	a := Inode{Type: TypeDir, Mode: 0o755, Ancestors: ChildAncestors(0, &root)}
	b := Inode{Type: TypeDir, Mode: 0o700, UID: 7, GID: 7, Ancestors: ChildAncestors(1, &a)}
	// /a/b/c grants search to all: no code.
	cdir := Inode{Type: TypeDir, Mode: 0o711, Ancestors: ChildAncestors(2, &b)}
	put("/", root)
	put("/a", a)
	put("/a/b", b)
	put("/a/b/c", cdir)
	for i := range n {
		put(fmt.Sprintf("/a/b/c/f%03d", i), Inode{Type: TypeFile, Mode: 0o644, Ancestors: ChildAncestors(3, &cdir)})
	}
	put("/z", Inode{Type: TypeFile, Ancestors: ChildAncestors(0, &root)})
	return idx
}

func mustInode(t *testing.T, s *Store, p string) Inode {
	t.Helper()
	ino, err := s.GetInode(context.Background(), p)
	if err != nil {
		t.Fatalf("GetInode(%s): %v", p, err)
	}
	return ino
}

func TestRecodeSubtreeAt(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	opts.RekeyStepKeys = 7
	s := openStore(t, opts)
	idx := codesFixture(t, s, 40)
	f := mustInode(t, s, "/a/b/c/f010")
	if want := []AncestorCode{{Depth: 2, Mode: 0o100, UID: 7, GID: 7}}; !reflect.DeepEqual(f.Ancestors, want) {
		t.Fatalf("fixture codes %v, want %v", f.Ancestors, want)
	}

	// chmod 0750 /a: a new code at depth 1, interrupted after two steps as
	// by a crash, then resumed.
	code := AncestorCode{Depth: 1, Mode: 0o110, UID: 0, GID: 0}
	crash := errors.New("simulated crash")
	s.rekeyHook = func(step int) error {
		if step == 2 {
			return crash
		}
		return nil
	}
	if _, err := s.RecodeSubtreeAt(ctx, idx, "/a", &code); !errors.Is(err, crash) {
		t.Fatalf("interrupted recode: %v", err)
	}
	s.rekeyHook = nil
	mustApplied(t, s, idx)
	if pend, err := s.PendingRecodes(ctx); err != nil || len(pend) != 1 || pend[0].Cursor == "" {
		t.Fatalf("pending recodes after the interruption: %+v, %v", pend, err)
	}
	if err := s.ResumeRekey(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if pend, err := s.PendingRecodes(ctx); err != nil || len(pend) != 0 {
		t.Fatalf("pending recodes after resuming: %+v, %v", pend, err)
	}
	// Replayed: skipped.
	if res, err := s.RecodeSubtreeAt(ctx, idx, "/a", nil); err != nil || !res.Skipped {
		t.Fatalf("replayed recode: %+v, %v", res, err)
	}
	for p, want := range map[string][]AncestorCode{
		"/a":          nil,
		"/a/b":        {code},
		"/a/b/c":      {code, {Depth: 2, Mode: 0o100, UID: 7, GID: 7}},
		"/a/b/c/f000": {code, {Depth: 2, Mode: 0o100, UID: 7, GID: 7}},
		"/a/b/c/f039": {code, {Depth: 2, Mode: 0o100, UID: 7, GID: 7}},
		"/z":          nil,
	} {
		ino := mustInode(t, s, p)
		if !reflect.DeepEqual(ino.Ancestors, want) {
			t.Errorf("%s: codes %v, want %v", p, ino.Ancestors, want)
		}
	}
	if v := mustInode(t, s, "/a/b/c/f010").Version; v != f.Version+1 {
		t.Errorf("recoded inode version %d, want %d (each inode recoded once)", v, f.Version+1)
	}

	// chmod 0755 /a/b: its code goes.
	idx++
	if res, err := s.RecodeSubtreeAt(ctx, idx, "/a/b", nil); err != nil || res.Err != nil {
		t.Fatalf("recode: %+v, %v", res, err)
	}
	if got := mustInode(t, s, "/a/b/c/f005").Ancestors; !reflect.DeepEqual(got, []AncestorCode{code}) {
		t.Errorf("after removing /a/b's code: %v", got)
	}

	// chmod 0700 / recodes every inode but the root.
	idx++
	rootCode := AncestorCode{Depth: 0, Mode: 0o100}
	if res, err := s.RecodeSubtreeAt(ctx, idx, "/", &rootCode); err != nil || res.Err != nil {
		t.Fatalf("recode of /: %+v, %v", res, err)
	}
	if got := mustInode(t, s, "/"); got.Ancestors != nil {
		t.Errorf("root recoded: %v", got.Ancestors)
	}
	if got := mustInode(t, s, "/z").Ancestors; !reflect.DeepEqual(got, []AncestorCode{rootCode}) {
		t.Errorf("/z after recoding /: %v", got)
	}

	// A code for the wrong depth is the entry's result.
	idx++
	if res, err := s.RecodeSubtreeAt(ctx, idx, "/a", &rootCode); err != nil || !errors.Is(res.Err, ErrInvalid) {
		t.Errorf("recode with a wrong depth: %+v, %v", res, err)
	}
	mustApplied(t, s, idx)
	checkCounts(t, s)
}

func TestRekeyMovesCodes(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	opts.RekeyStepKeys = 5
	s := openStore(t, opts)
	idx := codesFixture(t, s, 12)
	// mv /a/b /q/r where /q is 0750 (uid 3): the chain of /q/r is /q's code.
	chain := []AncestorCode{{Depth: 1, Mode: 0o110, UID: 3, GID: 3}}
	res, err := s.RekeyPrefixAt(ctx, idx, "/a/b", "/q/r", chain, nil)
	if err != nil || res.Err != nil {
		t.Fatalf("rekey: %+v, %v", res, err)
	}
	for p, want := range map[string][]AncestorCode{
		"/q/r":        chain,
		"/q/r/c":      {chain[0], {Depth: 2, Mode: 0o100, UID: 7, GID: 7}},
		"/q/r/c/f011": {chain[0], {Depth: 2, Mode: 0o100, UID: 7, GID: 7}},
		"/a":          nil,
		"/z":          nil,
	} {
		if got := mustInode(t, s, p).Ancestors; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: codes %v, want %v", p, got, want)
		}
	}
	// mv /q/r/c /c: one level up, an empty chain.
	idx++
	if res, err := s.RekeyPrefixAt(ctx, idx, "/q/r/c", "/c", nil, nil); err != nil || res.Err != nil {
		t.Fatalf("rekey: %+v, %v", res, err)
	}
	if got := mustInode(t, s, "/c/f003").Ancestors; got != nil {
		t.Errorf("/c/f003: %v", got)
	}
	// A chain that does not fit the destination's depth is refused.
	idx++
	if res, err := s.RekeyPrefixAt(ctx, idx, "/c", "/d", []AncestorCode{{Depth: 1}}, nil); err != nil || !errors.Is(res.Err, ErrInvalid) {
		t.Errorf("rekey with a chain too deep: %+v, %v", res, err)
	}
	checkCounts(t, s)
}
