package store

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var inodeCases = []Inode{
	{Type: TypeFile},
	{Type: TypeDir, Mode: 0o755, Nlink: 2},
	{Type: TypeFile, Mode: 0o4644, UID: 1000, GID: 100, Size: 1 << 40, Atime: 1, Mtime: -1, Ctime: math.MaxInt64, Nlink: 1, Layout: []byte{0, 1, 2, 255}, Version: 7},
	{Type: TypeFile, Mode: math.MaxUint32, UID: math.MaxUint32, GID: math.MaxUint32, Size: math.MinInt64, Atime: math.MinInt64, Mtime: math.MaxInt64, Ctime: 0, Nlink: math.MaxUint32, Version: math.MaxUint64},
	{Type: TypeDir, Layout: bytes.Repeat([]byte("L"), 4096)},
	{Type: TypeFile, Mode: 0o644, Ancestors: []AncestorCode{{Depth: 0, Mode: 0o100}, {Depth: 3, Mode: 0o110, UID: 1000, GID: math.MaxUint32}}},
	{Type: TypeSymlink, Mode: 0o777, Size: 9, Nlink: 1, Target: "../a/b.go"},
	{Type: TypeSymlink, Target: "/x", Ancestors: []AncestorCode{{Depth: 1, Mode: 0o100}}},
	{Type: TypeFile, Size: 12, Text: "hello, world"},
	{Type: TypeFile, Text: strings.Repeat("é", MaxTextLen/2), Ancestors: []AncestorCode{{Depth: 2, Mode: 0o110, UID: 3}}},
	{Type: TypeDir, Mode: 0o755, Nlink: 2, ID: 1},
	{Type: TypeFile, Size: 3, ID: math.MaxUint64, Text: "abc"},
	{Type: TypeSymlink, Target: "t", ID: 77, Ancestors: []AncestorCode{{Depth: 1, Mode: 0o100}}},
	{Type: TypeFile, Layout: []byte{1, 2}, ID: 1 << 33, Text: "x", Ancestors: []AncestorCode{{Depth: 4, Mode: 0o10}}},
	{Type: TypeFile, ID: 9, Xattrs: []Xattr{{Name: "security.selinux", Value: []byte("u:r:t\x00")}, {Name: "trusted.x"}, {Name: "user.a", Value: []byte{0, 255}}}},
	{Type: TypeDir, Xattrs: []Xattr{{Name: "user." + strings.Repeat("n", MaxXattrNameLen-5), Value: bytes.Repeat([]byte("v"), MaxXattrValueLen-MaxXattrNameLen)}}},
	{Type: TypeSymlink, Target: "t", Text: "", Ancestors: []AncestorCode{{Depth: 1, Mode: 0o100}}, Xattrs: []Xattr{{Name: "user.a", Value: []byte("1")}}},
	{Type: TypeFile, ID: 5, Anchor: "n1"},
	{Type: TypeSymlink, Target: "t", ID: 6, Anchor: "node-2", Ancestors: []AncestorCode{{Depth: 1, Mode: 0o100}}},
}

// TestInodeAnchorChecked: a stub has an id, is no directory and has no
// extended attributes; its encoding refuses what it cannot write.
func TestInodeAnchorChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		ino  Inode
		ok   bool
	}{
		{"file", Inode{Type: TypeFile, ID: 1, Anchor: "n1"}, true},
		{"fifo", Inode{Type: TypeFIFO, ID: 1, Anchor: "n1"}, true},
		{"no id", Inode{Type: TypeFile, Anchor: "n1"}, false},
		{"directory", Inode{Type: TypeDir, ID: 1, Anchor: "n1"}, false},
		{"extended attributes", Inode{Type: TypeFile, ID: 1, Anchor: "n1", Xattrs: []Xattr{{Name: "user.a"}}}, false},
		{"anchor too long", Inode{Type: TypeFile, ID: 1, Anchor: strings.Repeat("n", MaxIDLen+1)}, false},
	} {
		var b Batch
		b.PutInode("/f", tc.ino)
		if ok := b.Err() == nil; ok != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, b.Err(), tc.ok)
		}
		if !tc.ok && !errors.Is(b.Err(), ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", tc.name, b.Err())
		}
	}
	for _, bad := range [][]byte{
		// An id, an empty list of extended attributes and no anchor.
		append(encodeInode(&Inode{Type: TypeFile, ID: 3}), 0),
		// An empty anchor.
		append(encodeInode(&Inode{Type: TypeFile, ID: 3}), 0, 0),
		// Extended attributes and an anchor.
		append(encodeInode(&Inode{Type: TypeFile, ID: 3, Xattrs: []Xattr{{Name: "user.a"}}}), 1, 'n'),
	} {
		if _, err := decodeInode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode %x: %v, want ErrCorrupt", bad, err)
		}
	}
	if !IsLinkRecord(LinkRecordPath(42)) || IsLinkRecord("/.ghba/inodesx/1") || LinkRecordPath(42) != "/.ghba/inodes/42" {
		t.Errorf("LinkRecordPath(42) = %s", LinkRecordPath(42))
	}
}

// TestInodeXattrsChecked: names in a namespace, sorted and once, values
// and the whole within Linux's limits.
func TestInodeXattrsChecked(t *testing.T) {
	big := bytes.Repeat([]byte("v"), MaxXattrValueLen)
	for _, tc := range []struct {
		name string
		xs   []Xattr
		ok   bool
	}{
		{"one", []Xattr{{Name: "user.a"}}, true},
		{"largest value", []Xattr{{Name: "user.a", Value: big[:MaxXattrsLen-6]}}, true},
		{"value too long", []Xattr{{Name: "user.a", Value: append(big, 'v')}}, false},
		{"all too long", []Xattr{{Name: "user.a", Value: big[:MaxXattrsLen/2]}, {Name: "user.b", Value: big[:MaxXattrsLen/2]}}, false},
		{"no namespace", []Xattr{{Name: "a"}}, false},
		{"namespace only", []Xattr{{Name: "user."}}, false},
		{"system namespace", []Xattr{{Name: "system.posix_acl_access"}}, false},
		{"name too long", []Xattr{{Name: "user." + strings.Repeat("n", MaxXattrNameLen-4)}}, false},
		{"NUL in name", []Xattr{{Name: "user.a\x00b"}}, false},
		{"unsorted", []Xattr{{Name: "user.b"}, {Name: "user.a"}}, false},
		{"twice", []Xattr{{Name: "user.a"}, {Name: "user.a"}}, false},
	} {
		var b Batch
		b.PutInode("/f", Inode{Type: TypeFile, Xattrs: tc.xs})
		if ok := b.Err() == nil; ok != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, b.Err(), tc.ok)
		}
		if !tc.ok && !errors.Is(b.Err(), ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", tc.name, b.Err())
		}
	}
	if i, ok := XattrIndex([]Xattr{{Name: "user.a"}, {Name: "user.c"}}, "user.b"); ok || i != 1 {
		t.Errorf("XattrIndex of a missing name: %d %v, want 1 false", i, ok)
	}
}

func TestInodeTextChecked(t *testing.T) {
	for _, tc := range []struct {
		ino Inode
		ok  bool
	}{
		{Inode{Type: TypeFile, Text: "text"}, true},
		{Inode{Type: TypeFile, Text: strings.Repeat("x", MaxTextLen)}, true},
		{Inode{Type: TypeFile, Text: strings.Repeat("x", MaxTextLen+1)}, false},
		{Inode{Type: TypeFile, Text: "\xff\xfe"}, false},
		{Inode{Type: TypeDir, Text: "text"}, false},
		{Inode{Type: TypeSymlink, Target: "/a", Text: "text"}, false},
	} {
		var b Batch
		b.PutInode("/f", tc.ino)
		if ok := b.Err() == nil; ok != tc.ok {
			t.Errorf("PutInode(%v, %d bytes of text): err %v, want ok %v", tc.ino.Type, len(tc.ino.Text), b.Err(), tc.ok)
		}
		if !tc.ok && !errors.Is(b.Err(), ErrInvalid) {
			t.Errorf("PutInode(%v): %v is not ErrInvalid", tc.ino.Type, b.Err())
		}
	}
}

func TestInodeRoundTrip(t *testing.T) {
	for i, want := range inodeCases {
		got, err := decodeInode(encodeInode(&want))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("case %d: got %+v, want %+v", i, got, want)
		}
		if tp := inodeTypeOf(encodeInode(&want)); tp != want.Type {
			t.Errorf("case %d: inodeTypeOf = %v", i, tp)
		}
	}
}

func TestEntryIntentRekeyCountsRoundTrip(t *testing.T) {
	for _, e := range []Entry{{Name: "a", Type: TypeFile, Home: "n1"}, {Name: "é b", Type: TypeDir, Home: string(bytes.Repeat([]byte("h"), MaxIDLen))},
		{Name: "c", Type: TypeSymlink, Home: "n2", ID: 1}, {Name: "d", Type: TypeFile, Home: "n3", ID: math.MaxUint64}} {
		got, err := decodeEntry(e.Name, encodeEntry(&e))
		if err != nil || got != e {
			t.Errorf("entry %+v: got %+v, %v", e, got, err)
		}
	}
	for _, in := range []Intent{{ID: "x", Created: 5}, {ID: "y", Created: -3, Payload: []byte("payload")}} {
		got, err := decodeIntent(in.ID, encodeIntent(&in))
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Errorf("intent %+v: got %+v, %v", in, got, err)
		}
	}
	for _, rk := range []Rekey{{Old: "/a", New: "/b/c", Started: 42}, {Old: "/a", New: "/b/c", Chain: []AncestorCode{{Depth: 1, Mode: 0o100, UID: 7, GID: 8}}}} {
		got, err := decodeRekey(rk.Old, encodeRekey(&rk))
		if err != nil || !reflect.DeepEqual(got, rk) {
			t.Errorf("rekey %+v: got %+v, %v", rk, got, err)
		}
	}
	for _, rc := range []Recode{{Root: "/"}, {Root: "/a/b", Code: &AncestorCode{Depth: 2, Mode: 0o1}, Cursor: "/a/b/c"}} {
		got, err := decodeRecode(rc.Root, encodeRecode(&rc))
		if err != nil || !reflect.DeepEqual(got, rc) {
			t.Errorf("recode %+v: got %+v, %v", rc, got, err)
		}
	}
	for _, c := range []InodeCounts{{}, {Files: 1, Dirs: 2}, {Files: math.MaxInt64, Dirs: math.MaxInt64}} {
		got, err := decodeCounts(encodeCounts(c))
		if err != nil || got != c {
			t.Errorf("counts %+v: got %+v, %v", c, got, err)
		}
	}
	if v, err := decodeSchema(encodeSchema()); err != nil || v != schemaVersion {
		t.Errorf("schema: %d, %v", v, err)
	}
}

// TestDecodersRejectDamage checks that every strict prefix, every value with
// a trailing byte and every value with a bad version byte is rejected with
// ErrCorrupt.
func TestDecodersRejectDamage(t *testing.T) {
	ino := inodeCases[2]
	dec := map[string]struct {
		enc []byte
		dec func([]byte) error
	}{
		"inode":   {encodeInode(&ino), func(b []byte) error { _, err := decodeInode(b); return err }},
		"entry":   {encodeEntry(&Entry{Name: "n", Type: TypeDir, Home: "node-1"}), func(b []byte) error { _, err := decodeEntry("n", b); return err }},
		"intent":  {encodeIntent(&Intent{ID: "i", Created: 99, Payload: []byte("abc")}), func(b []byte) error { _, err := decodeIntent("i", b); return err }},
		"rekey":   {encodeRekey(&Rekey{Old: "/a", New: "/b", Started: 1}), func(b []byte) error { _, err := decodeRekey("/a", b); return err }},
		"recode":  {encodeRecode(&Recode{Root: "/a", Code: &AncestorCode{Depth: 1, UID: 300}, Cursor: "/a/b"}), func(b []byte) error { _, err := decodeRecode("/a", b); return err }},
		"counts":  {encodeCounts(InodeCounts{Files: 300, Dirs: 2}), func(b []byte) error { _, err := decodeCounts(b); return err }},
		"applied": {encodeApplied(1 << 40), func(b []byte) error { _, err := decodeApplied(b); return err }},
		"schema":  {encodeSchema(), func(b []byte) error { _, err := decodeSchema(b); return err }},
	}
	for name, c := range dec {
		t.Run(name, func(t *testing.T) {
			if err := c.dec(c.enc); err != nil {
				t.Fatalf("valid value rejected: %v", err)
			}
			for n := 0; n < len(c.enc); n++ {
				if err := c.dec(c.enc[:n]); !errors.Is(err, ErrCorrupt) {
					t.Errorf("prefix of %d bytes: err = %v, want ErrCorrupt", n, err)
				}
			}
			if err := c.dec(append(slices.Clone(c.enc), 0)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("trailing byte: err = %v", err)
			}
			bad := slices.Clone(c.enc)
			bad[0] = 2
			if err := c.dec(bad); !errors.Is(err, ErrCorrupt) {
				t.Errorf("version 2: err = %v", err)
			}
		})
	}
	// Specific bad fields.
	bad := encodeInode(&Inode{Type: TypeFile})
	bad[1] = 9
	if _, err := decodeInode(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad inode type: %v", err)
	}
	over := []byte{formatV1, byte(TypeFile), 0x80, 0x80, 0x80, 0x80, 0x10} // mode = 2^32
	over = append(over, make([]byte, 11)...)
	if _, err := decodeInode(over); !errors.Is(err, ErrCorrupt) {
		t.Errorf("mode overflow: %v", err)
	}
	// An id of 0 is written only before extended attributes, and a list
	// of them is never empty.
	zeroID := encodeInode(&Inode{Type: TypeFile, Text: "t"})
	if _, err := decodeInode(append(slices.Clone(zeroID), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("an id of 0 with nothing after it: %v", err)
	}
	if _, err := decodeInode(append(slices.Clone(zeroID), 0, 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("an empty list of extended attributes: %v", err)
	}
	if _, err := decodeInode(append(slices.Clone(zeroID), 0, 2, 6, 'u', 's', 'e', 'r', '.', 'b', 0, 6, 'u', 's', 'e', 'r', '.', 'a', 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("extended attributes out of order: %v", err)
	}
	if _, err := decodeRekey("/a", encodeRekey(&Rekey{Old: "/a", New: "rel"})); !errors.Is(err, ErrCorrupt) {
		t.Errorf("rekey with relative path: %v", err)
	}
}

func TestCheckPathAndName(t *testing.T) {
	paths := []struct {
		p  string
		ok bool
	}{
		{"/", true}, {"/a", true}, {"/a/b c/é", true}, {"", false}, {"a", false}, {"/a/", false},
		{"//a", false}, {"/a/./b", false}, {"/a/../b", false}, {"/..", false}, {"/a\x00b", false},
		{"/" + string(bytes.Repeat([]byte("x"), MaxPathLen-1)), true},
		{"/" + string(bytes.Repeat([]byte("x"), MaxPathLen)), false},
	}
	for _, c := range paths {
		err := checkPath(c.p)
		if (err == nil) != c.ok {
			t.Errorf("checkPath(%.20q) = %v, want ok=%v", c.p, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("checkPath(%.20q) = %v, not ErrInvalid", c.p, err)
		}
	}
	names := []struct {
		n  string
		ok bool
	}{
		{"a", true}, {"a b", true}, {"ü", true}, {"", false}, {".", false}, {"..", false}, {"...", true},
		{"a/b", false}, {"a\x00", false}, {string(bytes.Repeat([]byte("x"), MaxNameLen)), true},
		{string(bytes.Repeat([]byte("x"), MaxNameLen+1)), false},
	}
	for _, c := range names {
		if err := checkName(c.n); (err == nil) != c.ok {
			t.Errorf("checkName(%.20q) = %v, want ok=%v", c.n, err, c.ok)
		}
	}
}

// TestEntryKeysContiguous checks the property ReadDir relies on: sorting
// the entry keys of several directories with colliding prefixes keeps each
// directory's entries contiguous and sorted by name.
func TestEntryKeysContiguous(t *testing.T) {
	dirs := []string{"/a", "/a b", "/a/b", "/a!", "/a\u00e9", "/", "/a/b/c", "/ab"}
	names := []string{"a", "a b", "a!", "b", "\u00e9", "z", "A", "0"}
	var keys [][]byte
	for _, d := range dirs {
		for _, n := range names {
			keys = append(keys, entryKey(d, n))
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	var lastDir string
	seen := map[string]bool{}
	var run []string
	flush := func() {
		if !slices.IsSorted(run) || len(run) != len(names) {
			t.Errorf("dir %q: names %q not a sorted complete run", lastDir, run)
		}
		run = nil
	}
	for i, k := range keys {
		d, n, ok := parseEntryKey(k)
		if !ok {
			t.Fatalf("parseEntryKey(%q) failed", k)
		}
		if i > 0 && d != lastDir {
			flush()
			if seen[d] {
				t.Errorf("entries of %q are not contiguous", d)
			}
		}
		seen[d], lastDir = true, d
		run = append(run, n)
		if !bytes.HasPrefix(k, entryDirPrefix(d)) {
			t.Errorf("key %q lacks its dir prefix", k)
		}
	}
	flush()
}

func TestIsUnderAndRekeyed(t *testing.T) {
	cases := []struct {
		p, root string
		want    bool
	}{
		{"/a", "/a", true}, {"/a/b", "/a", true}, {"/a b", "/a", false}, {"/ab", "/a", false},
		{"/", "/a", false}, {"/x", "/", true}, {"/a", "/a/b", false},
	}
	for _, c := range cases {
		if got := isUnder(c.p, c.root); got != c.want {
			t.Errorf("isUnder(%q, %q) = %v", c.p, c.root, got)
		}
	}
	if got := rekeyed(entryKey("/a/x", "n"), "/a", "/bb"); !bytes.Equal(got, entryKey("/bb/x", "n")) {
		t.Errorf("rekeyed = %q", got)
	}
}

// Fuzz tests: decoders never panic, and whatever they accept re-encodes to
// a value that decodes to the same result.

func FuzzDecodeInode(f *testing.F) {
	for _, c := range inodeCases {
		f.Add(encodeInode(&c))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		ino, err := decodeInode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := decodeInode(encodeInode(&ino))
		if err != nil || !reflect.DeepEqual(again, ino) {
			t.Fatalf("re-encode: %+v vs %+v (%v)", again, ino, err)
		}
	})
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add("n", encodeEntry(&Entry{Name: "n", Type: TypeFile, Home: "node-1"}))
	f.Add("", []byte{1, 2, 0})
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		e, err := decodeEntry(name, b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := decodeEntry(name, encodeEntry(&e))
		if err != nil || again != e {
			t.Fatalf("re-encode: %+v vs %+v (%v)", again, e, err)
		}
	})
}

func FuzzDecodeIntent(f *testing.F) {
	f.Add(encodeIntent(&Intent{ID: "x", Created: 12345, Payload: []byte("rename /a /b")}))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := decodeIntent("id", b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := decodeIntent("id", encodeIntent(&in))
		if err != nil || !reflect.DeepEqual(again, in) {
			t.Fatalf("re-encode: %+v vs %+v (%v)", again, in, err)
		}
	})
}

func FuzzDecodeRekey(f *testing.F) {
	f.Add("/a", encodeRekey(&Rekey{Old: "/a", New: "/b", Started: 7}))
	f.Add("", []byte{1, 0, 1, '/'})
	f.Fuzz(func(t *testing.T, old string, b []byte) {
		rk, err := decodeRekey(old, b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := decodeRekey(old, encodeRekey(&rk))
		if err != nil || !reflect.DeepEqual(again, rk) {
			t.Fatalf("re-encode: %+v vs %+v (%v)", again, rk, err)
		}
	})
}

func FuzzDecodeCounts(f *testing.F) {
	f.Add(encodeCounts(InodeCounts{Files: 10, Dirs: 3}))
	f.Add(encodeSchema())
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := decodeCounts(b); err == nil {
			if again, err := decodeCounts(encodeCounts(c)); err != nil || again != c {
				t.Fatalf("re-encode: %+v vs %+v (%v)", again, c, err)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not ErrCorrupt: %v", err)
		}
		if v, err := decodeSchema(b); err == nil && !bytes.Equal(b, []byte{formatV1, v}) {
			t.Fatalf("schema %d accepted from %x", v, b)
		}
	})
}

func FuzzParseEntryKey(f *testing.F) {
	f.Add(entryKey("/a b", "c"))
	f.Add([]byte{pfxEntry, 0})
	f.Fuzz(func(t *testing.T, k []byte) {
		d, n, ok := parseEntryKey(k)
		if ok && !bytes.Equal(entryKey(d, n), k) {
			t.Fatalf("parse(%q) = %q, %q: does not re-encode", k, d, n)
		}
	})
}

// TestLegacyValuesDecodeWithoutIDs checks that inode and entry values
// written before ids existed (no trailing id) decode with ID 0, and that
// the optional trailing fields keep one encoding per value: an id of 0,
// an empty text not followed by an id and an empty code list not followed
// by anything are refused.
func TestLegacyValuesDecodeWithoutIDs(t *testing.T) {
	// An inode as builds before ids wrote it: fixed fields, layout, no
	// codes, no text.
	legacy := []byte{formatV1, byte(TypeFile), 0x80, 0x03 /* mode 0o600 */, 0, 0, 2 /* size 1 */, 0, 0, 0, 1, 3, 0}
	ino, err := decodeInode(legacy)
	if err != nil || ino.ID != 0 || ino.Mode != 0o600 || ino.Size != 1 || ino.Version != 3 {
		t.Fatalf("legacy inode: %+v, %v", ino, err)
	}
	withText := append(slices.Clone(legacy), 0, 2, 'h', 'i')
	if ino, err = decodeInode(withText); err != nil || ino.ID != 0 || ino.Text != "hi" {
		t.Fatalf("legacy inode with text: %+v, %v", ino, err)
	}
	if ino, err = decodeInode(append(slices.Clone(withText), 5)); err != nil || ino.ID != 5 {
		t.Fatalf("inode with an id after its text: %+v, %v", ino, err)
	}
	if ino, err = decodeInode(append(slices.Clone(legacy), 0, 0, 5)); err != nil || ino.ID != 5 || ino.Text != "" || ino.Ancestors != nil {
		t.Fatalf("inode with an id alone: %+v, %v", ino, err)
	}
	for name, b := range map[string][]byte{
		"id 0":                 append(slices.Clone(legacy), 0, 0, 0),
		"empty text, no id":    append(slices.Clone(legacy), 0, 0),
		"empty codes, nothing": append(slices.Clone(legacy), 0),
		"id overflow":          append(slices.Clone(legacy), 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
	} {
		if _, err := decodeInode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	entry := []byte{formatV1, byte(TypeDir), 2, 'n', '1'}
	if e, err := decodeEntry("d", entry); err != nil || e.ID != 0 || e.Home != "n1" {
		t.Fatalf("legacy entry: %+v, %v", e, err)
	}
	if e, err := decodeEntry("d", append(slices.Clone(entry), 9)); err != nil || e.ID != 9 {
		t.Fatalf("entry with an id: %+v, %v", e, err)
	}
	if _, err := decodeEntry("d", append(slices.Clone(entry), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("entry id 0: err = %v, want ErrCorrupt", err)
	}
}
