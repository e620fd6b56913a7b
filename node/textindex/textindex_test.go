package textindex

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
)

func search(t *testing.T, ix *Index, words, root string) []string {
	t.Helper()
	paths, total, err := ix.Search(context.Background(), words, root, 0, 0)
	if err != nil {
		t.Fatalf("Search(%q, %q): %v", words, root, err)
	}
	if int(total) != len(paths) {
		t.Fatalf("Search(%q, %q): total %d, %d hits", words, root, total, len(paths))
	}
	slices.Sort(paths)
	return paths
}

func TestIndex(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "text")
	ix, fresh, err := Open(dir, 0)
	if err != nil || !fresh {
		t.Fatalf("Open of nothing: fresh %v, %v", fresh, err)
	}
	// Removals before any text create nothing.
	if err := ix.Apply([]Op{{Path: "/a"}}); err != nil {
		t.Fatal(err)
	}
	if got := search(t, ix, "anything", "/"); len(got) != 0 {
		t.Fatalf("empty index found %v", got)
	}
	if err := ix.Apply([]Op{
		{Path: "/docs/raft.md", Text: "Raft elects a leader; the leader replicates the log."},
		{Path: "/docs/bloom.md", Text: "A Bloom filter answers membership queries with false positives."},
		{Path: "/src/main.go", Text: "package main // the leader election loop"},
		{Path: "/docs/old.md", Text: "leader"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Apply([]Op{{Path: "/docs/old.md"}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		words, root string
		want        []string
	}{
		{"leader", "/", []string{"/docs/raft.md", "/src/main.go"}},
		{"LEADER log", "/", []string{"/docs/raft.md"}},
		{"leader", "/docs", []string{"/docs/raft.md"}},
		{"leader", "/src/main.go", []string{"/src/main.go"}},
		{"leader", "/do", nil},
		{"bloom positives", "/", []string{"/docs/bloom.md"}},
		{"bloom raft", "/", nil},
	}
	for _, tc := range tests {
		if got := search(t, ix, tc.words, tc.root); !slices.Equal(got, tc.want) {
			t.Errorf("Search(%q, %q) = %v, want %v", tc.words, tc.root, got, tc.want)
		}
	}
	if n := ix.Count(); n != 3 {
		t.Errorf("Count = %d, want 3", n)
	}

	// Closed at index 7: kept when the store is at 7, rebuilt otherwise.
	if err := ix.Close(7); err != nil {
		t.Fatal(err)
	}
	ix, fresh, err = Open(dir, 7)
	if err != nil || fresh {
		t.Fatalf("Open after a clean close: fresh %v, %v", fresh, err)
	}
	if got := search(t, ix, "membership", "/"); !slices.Equal(got, []string{"/docs/bloom.md"}) {
		t.Fatalf("after reopening: %v", got)
	}
	// Not closed (a crash): the mark was consumed by Open.
	ix2, fresh, err := func() (*Index, bool, error) {
		ix.mu.Lock()
		defer ix.mu.Unlock()
		ix.idx.Close()
		ix.idx = nil
		return Open(dir, 7)
	}()
	if err != nil || !fresh {
		t.Fatalf("Open after a crash: fresh %v, %v", fresh, err)
	}
	if got := search(t, ix2, "membership", "/"); len(got) != 0 {
		t.Fatalf("a stale index was kept: %v", got)
	}
	if err := ix2.Apply([]Op{{Path: "/x", Text: "rebuilt"}}); err != nil {
		t.Fatal(err)
	}
	if err := ix2.Close(9); err != nil {
		t.Fatal(err)
	}
	if _, fresh, err := Open(dir, 10); err != nil || !fresh {
		t.Fatalf("Open at another applied index: fresh %v, %v", fresh, err)
	}
}
