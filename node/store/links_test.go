package store

import (
	"context"
	"testing"
)

// TestDirLinkCounts checks that a batch that counts links keeps every
// directory's link count at 2 plus its subdirectories as its entries
// change, through the batch's encoding, and that RecountLinks counts them
// again.
func TestDirLinkCounts(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testOptions(t))
	commit := func(b *Batch, max byte) {
		t.Helper()
		enc, err := b.AppendBinaryFormat(nil, max)
		if err != nil {
			t.Fatal(err)
		}
		var got Batch
		if err := got.UnmarshalBinary(enc); err != nil {
			t.Fatal(err)
		}
		if want := b.CountsLinks() && max >= BatchFormatV6; got.CountsLinks() != want {
			t.Fatalf("decoded batch of format %d counts links %v, want %v", BatchFormat(enc), got.CountsLinks(), want)
		}
		if err := s.Commit(ctx, &got); err != nil {
			t.Fatal(err)
		}
	}
	nlink := func(p string) uint32 {
		t.Helper()
		ino, err := s.GetInode(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return ino.Nlink
	}
	dir := func(id uint64) Inode { return Inode{Type: TypeDir, Mode: 0o755, Nlink: 2, Version: 1, ID: id} }
	var b Batch
	b.PutInode("/d", dir(2))
	b.PutInode("/e", dir(3))
	b.PutEntry("/", Entry{Name: "d", Type: TypeDir, Home: "n1", ID: 2})
	commit(&b, MaxBatchFormat) // not counted: "/" is not in this store

	type step struct {
		name  string
		build func(b *Batch)
		count bool
		max   byte
		d, e  uint32 // the link counts of /d and /e after it
	}
	mkdir := func(parent, name string, id uint64) func(b *Batch) {
		return func(b *Batch) {
			b.RequireInodeAbsent(parent + "/" + name)
			b.RequireEntryAbsent(parent, name)
			b.PutInode(parent+"/"+name, dir(id))
			b.PutEntry(parent, Entry{Name: name, Type: TypeDir, Home: "n1", ID: id})
		}
	}
	steps := []step{
		{"mkdir counts", mkdir("/d", "s", 10), true, MaxBatchFormat, 3, 2},
		{"a second one", mkdir("/d", "t", 11), true, MaxBatchFormat, 4, 2},
		{"a file is no link", func(b *Batch) {
			b.RequireEntryAbsent("/d", "f")
			b.PutEntry("/d", Entry{Name: "f", Type: TypeFile, Home: "n1", ID: 12})
		}, true, MaxBatchFormat, 4, 2},
		{"a put over the same directory's entry is none either", func(b *Batch) {
			b.PutEntry("/d", Entry{Name: "s", Type: TypeDir, Home: "n2", ID: 10})
		}, true, MaxBatchFormat, 4, 2},
		{"a chmod that read the count before keeps the stored one", func(b *Batch) {
			in := dir(2)
			in.Mode = 0o700
			b.PutInode("/d", in)
		}, true, MaxBatchFormat, 4, 2},
		{"a rename between directories moves a link", func(b *Batch) {
			b.DeleteEntry("/d", "t")
			b.PutEntry("/e", Entry{Name: "t", Type: TypeDir, Home: "n1", ID: 11})
		}, true, MaxBatchFormat, 3, 3},
		{"a directory renamed over another takes its count", func(b *Batch) {
			in := dir(13)
			in.Nlink = 7
			b.PutInode("/e", in)
		}, true, MaxBatchFormat, 3, 7},
		{"rmdir", func(b *Batch) {
			b.DeleteEntry("/d", "s")
			b.DeleteInode("/d/s")
		}, true, MaxBatchFormat, 2, 7},
		{"never below 2", func(b *Batch) {
			b.PutEntry("/d", Entry{Name: "u", Type: TypeDir, Home: "n1", ID: 14})
			b.DeleteEntry("/d", "u")
			b.DeleteEntry("/d", "u")
		}, true, MaxBatchFormat, 2, 7},
		{"format 5 counts nothing", mkdir("/d", "v", 15), true, BatchFormatV5, 2, 7},
		{"nor a batch that does not ask", mkdir("/d", "w", 16), false, MaxBatchFormat, 2, 7},
		{"a recount finds both", func(b *Batch) {
			b.RecountLinks("/d")
			b.RecountLinks("/e")
			b.RecountLinks("/nowhere")
			b.RecountLinks("/d/v")
		}, false, MaxBatchFormat, 4, 3},
		{"and counts what its own batch changes", func(b *Batch) {
			b.DeleteEntry("/d", "v")
			b.RecountLinks("/d")
		}, true, MaxBatchFormat, 3, 3},
	}
	for _, st := range steps {
		b.Reset()
		st.build(&b)
		if st.count {
			b.CountLinks()
		}
		commit(&b, st.max)
		if d, e := nlink("/d"), nlink("/e"); d != st.d || e != st.e {
			t.Errorf("%s: /d has %d links, /e %d; want %d and %d", st.name, d, e, st.d, st.e)
		}
	}
	if ino, err := s.GetInode(ctx, "/d"); err != nil || ino.Version != 1 || ino.Mode != 0o700 {
		t.Errorf("/d after the steps: %+v, %v; want version 1 (a count is no new version), mode 0700", ino, err)
	}
}
