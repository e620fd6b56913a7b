package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// sampleBatch uses every precondition and mutation, with edge values.
func sampleBatch() *Batch {
	var b Batch
	b.RequireInodeAbsent("/a")
	b.RequireInodeExists("/d")
	b.RequireInodeVersion("/d", math.MaxUint64)
	b.RequireEntryAbsent("/d", "x y")
	b.RequireEntryExists("/", "d")
	b.RequireDirEmpty("/e")
	b.RequireIntentAbsent("i2")
	b.RequireIntentExists("i1")
	b.RequireMeta("m", []byte("v"))
	b.RequireMeta("absent", nil)
	b.RequireMeta("empty", []byte{})
	b.PutInode("/a", inodeCases[2])
	b.PutInode("/a/\u65e5", Inode{Type: TypeDir})
	b.DeleteInode("/b")
	b.PutEntry("/d", Entry{Name: "\u00e9 z", Type: TypeDir, Home: "node-2"})
	b.DeleteEntry("/d", "f")
	b.putIntent(Intent{ID: "i3", Created: math.MinInt64, Payload: []byte("rename /a /b")})
	b.putIntent(Intent{ID: "i4", Created: 7})
	b.DeleteIntent("i1")
	b.SetMeta("m", []byte("w"))
	b.SetMeta("nil", nil)
	b.DeleteMeta("absent")
	return &b
}

func TestBatchBinaryRoundTrip(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen)
	cases := map[string]*Batch{
		"empty":  {},
		"sample": sampleBatch(),
		"limits": func() *Batch {
			var b Batch
			p := "/" + strings.Repeat("p", MaxPathLen-1)
			b.RequireInodeExists(p)
			b.PutEntry("/", Entry{Name: long, Type: TypeFile, Home: strings.Repeat("h", MaxIDLen)})
			b.PutInode(p, Inode{Type: TypeFile, Layout: bytes.Repeat([]byte{0xff}, MaxBlobLen)})
			b.SetMeta(strings.Repeat("k", MaxIDLen), bytes.Repeat([]byte{0}, MaxBlobLen))
			return &b
		}(),
		"create": createBatch("/dir/file", TypeFile, "n1"),
		"ids": func() *Batch {
			var b Batch
			b.PutInode("/f", Inode{Type: TypeFile, ID: 1 << 40})
			b.PutEntry("/", Entry{Name: "f", Type: TypeFile, Home: "n1", ID: 1 << 40})
			b.PutEntry("/", Entry{Name: "g", Type: TypeFile, Home: "n1"}) // no id yet: 0 in version 2
			b.PutEntry("/", Entry{Name: "h", Type: TypeDir, Home: "n2", ID: math.MaxUint64})
			return &b
		}(),
		"text": func() *Batch {
			var b Batch
			b.PutInode("/a", Inode{Type: TypeFile})
			b.PutInode("/t", Inode{Type: TypeFile, Text: "some words"})
			return &b
		}(),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			enc, err := b.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var got Batch
			got.PutInode("/stale", Inode{Type: TypeFile, Text: "stale"}) // replaced by the decode
			if err := got.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.conds, b.conds) || !reflect.DeepEqual(got.muts, b.muts) || got.err != nil || got.HasText() != b.HasText() {
				t.Fatalf("decoded batch differs:\n got %+v\nwant %+v", got, *b)
			}
			again, err := got.AppendBinary([]byte("hdr"))
			if err != nil || !bytes.Equal(again[3:], enc) || string(again[:3]) != "hdr" {
				t.Fatalf("re-encoding differs (%v)", err)
			}
			if name == "sample" {
				t.Logf("sample batch: %d operations in %d bytes", b.Len(), len(enc))
			}
		})
	}
}

func TestBatchBinaryRejects(t *testing.T) {
	enc, err := sampleBatch().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var bad Batch
	bad.PutInode("rel", Inode{Type: TypeFile})
	if _, err := bad.MarshalBinary(); !errors.Is(err, ErrInvalid) {
		t.Errorf("MarshalBinary of an invalid batch: %v", err)
	}
	// A batch that puts an inode with extended attributes, as version 3.
	var withXattrs Batch
	withXattrs.PutInode("/x", Inode{Type: TypeFile, Xattrs: []Xattr{{Name: "user.a"}}})
	xattrsV3, err := withXattrs.MarshalBinary()
	if err != nil || BatchFormat(xattrsV3) != batchFormatV4 {
		t.Fatalf("a batch with extended attributes: format %d, err %v; want %d", BatchFormat(xattrsV3), err, batchFormatV4)
	}
	xattrsV3 = append([]byte{batchFormatV3}, xattrsV3[1:]...)
	xattrsV3 = append(xattrsV3, 0) // version 3's stamp
	if _, err := withXattrs.AppendBinaryFormat(nil, batchFormatV3); !errors.Is(err, ErrFormatTooOld) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("extended attributes in format 3 at most: %v, want ErrFormatTooOld", err)
	}
	// A batch with a path longer than the older formats take.
	var withLong Batch
	longDir := "/" + strings.Repeat("d", LegacyMaxPathLen)
	withLong.PutEntry(longDir, Entry{Name: "n", Type: TypeFile, Home: "h"})
	longV4, err := withLong.MarshalBinary()
	if err != nil || BatchFormat(longV4) != batchFormatV5 {
		t.Fatalf("a batch with a long path: format %d, err %v; want %d", BatchFormat(longV4), err, batchFormatV5)
	}
	var back Batch
	if err := back.UnmarshalBinary(longV4); err != nil || !back.longPaths() {
		t.Fatalf("decoding a long path: %v", err)
	}
	if _, err := withLong.AppendBinaryFormat(nil, batchFormatV4); !errors.Is(err, ErrFormatTooOld) {
		t.Errorf("a long path in format 4 at most: %v, want ErrFormatTooOld", err)
	}
	longV4 = append([]byte{batchFormatV4}, longV4[1:]...)
	// A batch with a hard link's stub: format 7, refused below.
	var withStub Batch
	withStub.PutInode("/s", Inode{Type: TypeFile, ID: 4, Anchor: "n1"})
	stubV7, err := withStub.MarshalBinary()
	if err != nil || BatchFormat(stubV7) != batchFormatV7 {
		t.Fatalf("a batch with a stub: format %d, err %v; want %d", BatchFormat(stubV7), err, batchFormatV7)
	}
	if _, err := withStub.AppendBinaryFormat(nil, batchFormatV6); !errors.Is(err, ErrFormatTooOld) {
		t.Errorf("a stub in format 6 at most: %v, want ErrFormatTooOld", err)
	}
	withStub.PutEntry("/", Entry{Name: "s", Type: TypeFile, Home: "n1", ID: 4})
	if _, err := withStub.MarshalBinary(); !errors.Is(err, ErrInvalid) {
		t.Errorf("a stub with an entry and no link counts: %v, want ErrInvalid", err)
	}
	withStub.CountLinks()
	if enc, err := withStub.MarshalBinary(); err != nil || BatchFormat(enc) != batchFormatV7 {
		t.Errorf("a stub with an entry, counting links: format %d, %v", BatchFormat(enc), err)
	} else if back := (Batch{}); back.UnmarshalBinary(enc) != nil || !back.CountsLinks() {
		t.Errorf("a stub with an entry decoded: counts links %v", back.CountsLinks())
	}
	stubV6 := append([]byte{batchFormatV6}, stubV7[1:]...)
	// A valid operation with an invalid argument, encoded by hand.
	invalidPath := []byte{batchFormatV1, 0, 1, opDeleteInode, 3, 'a', '/', 'b'}
	cases := []struct {
		name string
		data []byte
		want []error
	}{
		{"nil", nil, []error{ErrCorrupt}},
		{"version 0", []byte{0, 0, 0}, []error{ErrUnknownVersion}},
		{"version 8", append([]byte{8}, enc[1:]...), []error{ErrUnknownVersion}},
		{"version 7 without a stub", append([]byte{batchFormatV7}, enc[1:]...), []error{ErrCorrupt}},
		{"stub in version 6", stubV6, []error{ErrCorrupt}},
		{"version 6 that changes no entry", []byte{batchFormatV6, 0, 1, opDeleteInode, 2, '/', 'a', 0}, []error{ErrCorrupt}},
		{"recount in version 5", []byte{batchFormatV5, 0, 1, opRecountLinks, 2, '/', 'a', 0}, []error{ErrCorrupt}},
		{"version 5 without a long path", append([]byte{batchFormatV5}, enc[1:]...), []error{ErrCorrupt}},
		{"long path in version 4", longV4, []error{ErrCorrupt}},
		{"version 4 without extended attributes", append([]byte{batchFormatV4}, enc[1:]...), []error{ErrCorrupt}},
		{"extended attributes in version 3", xattrsV3, []error{ErrCorrupt}},
		{"special file in version 2", []byte{batchFormatV2, 0, 1, opPutEntry, 1, '/', 1, 'n', byte(TypeFIFO), 1, 'h', 0}, []error{ErrCorrupt}},
		{"version 3 without a special file", []byte{batchFormatV3, 0, 1, opPutEntry, 1, '/', 1, 'n', byte(TypeFile), 1, 'h', 0}, []error{ErrCorrupt}},
		{"stamp on a batch that changes no entry", []byte{batchFormatV3, 0, 1, opDeleteInode, 2, '/', 'a', 2}, []error{ErrCorrupt}},
		{"version 3 without a special file or a stamp", []byte{batchFormatV3, 0, 1, opPutEntry, 1, '/', 1, 'n', byte(TypeFile), 1, 'h', 0, 0}, []error{ErrCorrupt}},
		{"negative stamp", []byte{batchFormatV3, 0, 1, opPutEntry, 1, '/', 1, 'n', byte(TypeFile), 1, 'h', 0, 1}, []error{ErrCorrupt}},
		{"version 2 entry without its id", []byte{batchFormatV2, 0, 1, opPutEntry, 1, '/', 1, 'n', 1, 1, 'h'}, []error{ErrCorrupt}},
		{"trailing byte", append(slices.Clone(enc), 0), []error{ErrCorrupt}},
		{"count too large", []byte{batchFormatV1, 0xff, 0xff, 0x03, 0}, []error{ErrCorrupt}},
		{"unknown precondition", []byte{batchFormatV1, 1, 10, 0, 0}, []error{ErrCorrupt}},
		{"unknown op", []byte{batchFormatV1, 0, 1, 10, 0}, []error{ErrCorrupt}},
		{"meta presence 2", []byte{batchFormatV1, 1, byte(condMetaEquals), 1, 'm', 2, 0, 0}, []error{ErrCorrupt}},
		{"absent meta with value", []byte{batchFormatV1, 1, byte(condMetaEquals), 1, 'm', 0, 1, 'v', 0}, []error{ErrCorrupt}},
		{"invalid path", invalidPath, []error{ErrCorrupt, ErrInvalid}},
		{"bad entry type", []byte{batchFormatV1, 0, 1, opPutEntry, 1, '/', 1, 'n', 9, 1, 'h'}, []error{ErrCorrupt, ErrInvalid}},
		{"bad inode value", []byte{batchFormatV1, 0, 1, opPutInode, 2, '/', 'a', 1, 7}, []error{ErrCorrupt}},
		{"path too long", append([]byte{batchFormatV1, 0, 1, opDeleteInode, 0x81, 0x20}, make([]byte, MaxPathLen+1)...), []error{ErrCorrupt}},
	}
	for n := 1; n < len(enc); n++ {
		cases = append(cases, struct {
			name string
			data []byte
			want []error
		}{fmt.Sprintf("prefix %d", n), enc[:n], []error{ErrCorrupt}})
	}
	s := openStore(t, testOptions(t))
	for _, c := range cases {
		var b Batch
		b.PutInode("/before", Inode{Type: TypeFile})
		err := b.UnmarshalBinary(c.data)
		for _, want := range c.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: err = %v, want %v", c.name, err, want)
			}
		}
		if errors.Is(err, ErrUnknownVersion) && errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: unknown version also reported as corrupt: %v", c.name, err)
		}
		if b.Err() != err || b.Len() != 0 {
			t.Errorf("%s: after a failed decode Err() = %v, Len() = %d", c.name, b.Err(), b.Len())
		}
		if cerr := s.Commit(context.Background(), &b); cerr != err {
			t.Errorf("%s: Commit of the failed batch = %v", c.name, cerr)
		}
	}
	if c := checkCounts(t, s); c.Total() != 0 {
		t.Errorf("a rejected batch was applied: %+v", c)
	}
}

// randomBatch builds a batch of random operations over a small set of
// paths, ids and keys, so that preconditions hold about half the time.
func randomBatch(rng *rand.Rand, seq int) *Batch {
	paths := []string{"/", "/a", "/a/b", "/a b", "/c", "/c/d"}
	names := []string{"b", "d", "x", "a b"}
	ids := []string{"i1", "i2", "i3"}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	var b Batch
	for range rng.IntN(3) {
		switch rng.IntN(9) {
		case 0:
			b.RequireInodeAbsent(pick(paths))
		case 1:
			b.RequireInodeExists(pick(paths))
		case 2:
			b.RequireInodeVersion(pick(paths), uint64(rng.IntN(3)))
		case 3:
			b.RequireEntryAbsent(pick(paths), pick(names))
		case 4:
			b.RequireEntryExists(pick(paths), pick(names))
		case 5:
			b.RequireDirEmpty(pick(paths))
		case 6:
			b.RequireIntentAbsent(pick(ids))
		case 7:
			b.RequireIntentExists(pick(ids))
		default:
			vals := [][]byte{nil, {}, []byte("v")}
			b.RequireMeta(pick(ids), vals[rng.IntN(3)])
		}
	}
	for range 1 + rng.IntN(4) {
		types := []FileType{TypeFile, TypeDir, TypeFile, TypeDir, TypeFIFO, TypeSocket, TypeCharDev, TypeBlockDev}
		typ := types[rng.IntN(len(types))]
		var rdev uint64
		if typ.Device() {
			rdev = uint64(rng.IntN(1 << 20))
		}
		switch rng.IntN(9) {
		case 8:
			b.RecountLinks(pick(paths))
		case 0, 1:
			b.PutInode(pick(paths), Inode{Type: typ, Size: int64(seq), Version: uint64(rng.IntN(3)), Rdev: rdev})
		case 2:
			b.DeleteInode(pick(paths))
		case 3:
			b.PutEntry(pick(paths), Entry{Name: pick(names), Type: typ, Home: pick(ids)})
		case 4:
			b.DeleteEntry(pick(paths), pick(names))
		case 5:
			b.putIntent(Intent{ID: pick(ids), Created: int64(seq), Payload: []byte(pick(paths))})
		case 6:
			b.DeleteIntent(pick(ids))
		default:
			if rng.IntN(2) == 0 {
				b.SetMeta(pick(ids), []byte(pick([]string{"", "v", "w"})))
			} else {
				b.DeleteMeta(pick(ids))
			}
		}
	}
	if rng.IntN(3) == 0 {
		b.StampDirTimes(int64(seq) * 1000)
	}
	if rng.IntN(2) == 0 {
		b.CountLinks()
	}
	return &b
}

// TestDecodedBatchBehavesSame applies 500 random batches to one store and
// their decoded copies to another: every result and the final contents
// agree.
func TestDecodedBatchBehavesSame(t *testing.T) {
	ctx := context.Background()
	orig, copied := openStore(t, testOptions(t)), openStore(t, testOptions(t))
	rng := rand.New(rand.NewPCG(1, 2))
	var origLog, copyLog []LogEntry
	for i := 1; i <= 500; i++ {
		b := randomBatch(rng, i)
		enc, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var d Batch
		if err := d.UnmarshalBinary(enc); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		origLog = append(origLog, LogEntry{Index: uint64(i), Batch: b})
		copyLog = append(copyLog, LogEntry{Index: uint64(i), Batch: &d})
	}
	failed := 0
	for from := 0; from < len(origLog); from += 16 {
		to := min(from+16, len(origLog))
		want, err := orig.ApplyLog(ctx, origLog[from:to])
		if err != nil {
			t.Fatal(err)
		}
		got, err := copied.ApplyLog(ctx, copyLog[from:to])
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
				t.Fatalf("entry %d: decoded %+v, original %+v", want[i].Index, got[i], want[i])
			}
			if want[i].Err != nil {
				failed++
			}
		}
	}
	t.Logf("%d of %d batches failed a precondition", failed, len(origLog))
	if failed == 0 || failed == len(origLog) {
		t.Errorf("random batches do not exercise both outcomes")
	}
	diffDumps(t, dump(t, copied), dump(t, orig))
	checkCounts(t, copied)
}

// FuzzBatchDecode: UnmarshalBinary never panics, fails only with
// ErrCorrupt or ErrUnknownVersion, and what it accepts re-encodes to bytes
// that decode to the same batch (and re-encode identically).
func FuzzBatchDecode(f *testing.F) {
	for _, b := range []*Batch{{}, sampleBatch(), createBatch("/a/b", TypeDir, "n1")} {
		enc, err := b.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20 {
		enc, err := randomBatch(rng, i).MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte{})
	f.Add([]byte{batchFormatV1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		err := b.UnmarshalBinary(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("error is neither ErrCorrupt nor ErrUnknownVersion: %v", err)
			}
			if b.Err() != err || b.Len() != 0 {
				t.Fatalf("failed decode left Err %v, Len %d", b.Err(), b.Len())
			}
			return
		}
		enc, err := b.MarshalBinary()
		if err != nil {
			t.Fatalf("accepted batch does not encode: %v", err)
		}
		var again Batch
		if err := again.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-encoded batch rejected: %v", err)
		}
		if !reflect.DeepEqual(again.conds, b.conds) || !reflect.DeepEqual(again.muts, b.muts) {
			t.Fatalf("re-decoded batch differs")
		}
		if enc2, err := again.MarshalBinary(); err != nil || !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding not stable (%v)", err)
		}
	})
}

// TestBatchFormatVersionByEntryIDs checks that a batch is written in
// format version 1, as before entry ids existed, unless one of its entries
// carries an id, and that version 2 carries the ids.
func TestBatchFormatVersionByEntryIDs(t *testing.T) {
	var old Batch
	old.PutInode("/f", Inode{Type: TypeFile, ID: 9}) // an inode's id is in its value: no new format
	old.PutEntry("/", Entry{Name: "f", Type: TypeFile, Home: "n1"})
	enc, err := old.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if enc[0] != batchFormatV1 {
		t.Errorf("batch without entry ids: format %d, want %d", enc[0], batchFormatV1)
	}
	var withID Batch
	withID.PutEntry("/", Entry{Name: "f", Type: TypeFile, Home: "n1", ID: 9})
	if enc, err = withID.MarshalBinary(); err != nil {
		t.Fatal(err)
	}
	if enc[0] != batchFormatV2 {
		t.Fatalf("batch with an entry id: format %d, want %d", enc[0], batchFormatV2)
	}
	var got Batch
	if err := got.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	e, err := decodeEntry("f", got.muts[0].val)
	if err != nil || e.ID != 9 {
		t.Fatalf("decoded entry %+v (%v), want id 9", e, err)
	}
}

// TestBatchFormatPinnedToV1 checks that a batch encoded in format 1 at
// most, as a shard leader does while a replica may run a build without
// ids, is written as version 1 without the ids of its entries and inodes,
// and keeps everything else.
func TestBatchFormatPinnedToV1(t *testing.T) {
	var b Batch
	b.PutInode("/f", Inode{Type: TypeFile, ID: 9, Size: 5, Text: "hello"})
	b.PutEntry("/", Entry{Name: "f", Type: TypeFile, Home: "n1", ID: 9})
	enc, err := b.AppendBinaryFormat(nil, BatchFormatV1)
	if err != nil {
		t.Fatal(err)
	}
	if BatchFormat(enc) != BatchFormatV1 {
		t.Fatalf("format %d, want %d", BatchFormat(enc), BatchFormatV1)
	}
	var got Batch
	if err := got.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	ino, err := decodeInode(got.muts[0].val)
	if err != nil || ino.ID != 0 || ino.Size != 5 || ino.Text != "hello" {
		t.Fatalf("decoded inode %+v (%v), want no id, size 5, text hello", ino, err)
	}
	e, err := decodeEntry("f", got.muts[1].val)
	if err != nil || e.ID != 0 || e.Home != "n1" {
		t.Fatalf("decoded entry %+v (%v), want no id, home n1", e, err)
	}
	if _, err := b.AppendBinaryFormat(nil, MaxBatchFormat+1); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("format %d: err %v, want ErrUnknownVersion", MaxBatchFormat+1, err)
	}
	if enc2, err := b.AppendBinaryFormat(nil, MaxBatchFormat); err != nil || BatchFormat(enc2) != batchFormatV2 {
		t.Fatalf("newest format: %v, format %d", err, BatchFormat(enc2))
	}
}

// TestStampDirTimes checks that a stamped batch sets the times of the
// directories whose entries it changes, through its binary encoding,
// never backwards and without a new version, and that nothing else is
// stamped.
func TestStampDirTimes(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	commit := func(b *Batch) {
		t.Helper()
		enc, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Batch
		if err := got.UnmarshalBinary(enc); err != nil {
			t.Fatal(err)
		}
		if got.DirTime() != b.DirTime() {
			t.Fatalf("decoded stamp %d, want %d", got.DirTime(), b.DirTime())
		}
		if err := s.Commit(ctx, &got); err != nil {
			t.Fatal(err)
		}
	}
	times := func(p string) (int64, int64) {
		t.Helper()
		ino, err := s.GetInode(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ino.Version != 1 {
			t.Errorf("%s: version %d, want 1 (a time set by a stamp is no new version)", p, ino.Version)
		}
		return ino.Mtime, ino.Ctime
	}
	var b Batch
	b.PutInode("/d", Inode{Type: TypeDir, Mode: 0o755, Mtime: 100, Ctime: 100, Version: 1})
	b.PutInode("/e", Inode{Type: TypeDir, Mode: 0o755, Mtime: 100, Ctime: 100, Version: 1})
	commit(&b)

	steps := []struct {
		name       string
		build      func(b *Batch)
		stamp      int64
		wantMtime  int64
		wantStamp  int64
		untouchedE bool
	}{
		{"a create stamps its directory", func(b *Batch) {
			b.PutInode("/d/f", Inode{Type: TypeFile, Version: 1})
			b.PutEntry("/d", Entry{Name: "f", Type: TypeFile, Home: "n1"})
		}, 500, 500, 500, true},
		{"an older stamp does not move the times back", func(b *Batch) {
			b.DeleteEntry("/d", "f")
			b.DeleteInode("/d/f")
		}, 300, 500, 300, true},
		{"a later one moves them", func(b *Batch) {
			b.PutEntry("/d", Entry{Name: "g", Type: TypeFile, Home: "n2"})
		}, 700, 700, 700, true},
		{"a batch without an entry is not stamped", func(b *Batch) {
			b.PutInode("/d/h", Inode{Type: TypeFile, Version: 1})
		}, 900, 700, 0, true},
		{"KeepDirTimes", func(b *Batch) {
			b.PutEntry("/d", Entry{Name: "g", Type: TypeFile, Home: "n2", ID: 7})
			b.KeepDirTimes()
		}, 900, 700, 0, true},
	}
	for _, st := range steps {
		b.Reset()
		st.build(&b)
		b.StampDirTimes(st.stamp)
		if b.DirTime() != st.wantStamp {
			t.Fatalf("%s: stamp %d, want %d", st.name, b.DirTime(), st.wantStamp)
		}
		commit(&b)
		if m, c := times("/d"); m != st.wantMtime || c != st.wantMtime {
			t.Errorf("%s: /d mtime %d ctime %d, want %d", st.name, m, c, st.wantMtime)
		}
		if m, _ := times("/e"); m != 100 {
			t.Errorf("%s: /e, whose entries no batch changed, has mtime %d", st.name, m)
		}
	}

	// Below format 3 the stamp is left out (an older build keeps no
	// directory times).
	b.Reset()
	b.PutEntry("/e", Entry{Name: "x", Type: TypeFile, Home: "n1"})
	b.StampDirTimes(1000)
	enc, err := b.AppendBinaryFormat(nil, BatchFormatV2)
	if err != nil {
		t.Fatal(err)
	}
	var got Batch
	if err := got.UnmarshalBinary(enc); err != nil || BatchFormat(enc) != BatchFormatV1 || got.DirTime() != 0 {
		t.Fatalf("stamped batch in format 2 at most: format %d, stamp %d, %v; want format 1, no stamp", BatchFormat(enc), got.DirTime(), err)
	}
}
