package store

import (
	"slices"
	"testing"
)

// TestChangedPaths: a batch names the paths whose inode it puts or deletes
// and those whose directory entry it puts or deletes, in order; intents,
// meta records and preconditions change no path.
func TestChangedPaths(t *testing.T) {
	var b Batch
	b.RequireInodeAbsent("/d/x")
	b.PutInode("/d/x", Inode{Type: TypeFile, Mode: 0o644})
	b.PutEntry("/d", Entry{Name: "x", Type: TypeFile, Home: "n1"})
	b.PutEntry("/", Entry{Name: "top", Type: TypeDir, Home: "n1"})
	b.DeleteEntry("/e", "y")
	b.DeleteInode("/e/y")
	b.PutIntent("t1", []byte("p"))
	b.SetMeta("k", []byte("v"))
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"/d/x", "/d/x", "/top", "/e/y", "/e/y"}
	if got := b.ChangedPaths(); !slices.Equal(got, want) {
		t.Errorf("ChangedPaths() = %q, want %q", got, want)
	}
	if got, want := b.InodePaths(), []string{"/d/x", "/e/y"}; !slices.Equal(got, want) {
		t.Errorf("InodePaths() = %q, want %q", got, want)
	}
}
