package client

import (
	"fmt"
	"testing"
)

// cacheLen returns the number of entries h holds (both generations).
func cacheLen(h *homeCache) int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.cur) + len(h.old)
}

func TestHomeCacheBound(t *testing.T) {
	h := newHomeCache(100)
	for i := range 1000 {
		h.put(fmt.Sprintf("/d%d/p", i), "addr", false)
	}
	if n := cacheLen(h); n > 100 {
		t.Errorf("cache holds %d entries, bound 100", n)
	}
	if h.get("/d999/p") != "addr" {
		t.Error("recent entry missing")
	}
	if h.get("/d0/p") != "" {
		t.Error("old entry kept")
	}
	h.forget("/d999/p")
	if h.get("/d999/p") != "" {
		t.Error("forgotten entry kept")
	}
	var off *homeCache = newHomeCache(-1)
	off.put("/a", "x", false)
	if off.get("/a") != "" || cacheLen(off) != 0 {
		t.Error("disabled cache stores")
	}
}

// TestHomeCacheByDirectory: files that share their directory's home take
// one entry for all of them, so a sweep over far more files than the
// cache holds still finds their homes; a file homed elsewhere keeps its
// own entry; forgetting a file forgets its directory's home too.
func TestHomeCacheByDirectory(t *testing.T) {
	h := newHomeCache(100)
	for d := range 40 {
		for f := range 500 {
			h.put(fmt.Sprintf("/d%d/f%d", d, f), fmt.Sprint("node", d%3), false)
		}
	}
	if n := cacheLen(h); n > 100 {
		t.Errorf("cache holds %d entries, bound 100", n)
	}
	for d := range 40 {
		if got, want := h.get(fmt.Sprintf("/d%d/never-seen", d)), fmt.Sprint("node", d%3); got != want {
			t.Errorf("/d%d/never-seen: %q, want its directory's files' home %q", d, got, want)
		}
	}
	h.put("/d1/spread", "node9", false)
	if got := h.get("/d1/spread"); got != "node9" {
		t.Errorf("/d1/spread: %q, want its own home node9", got)
	}
	if got := h.get("/d1/f3"); got != "node1" {
		t.Errorf("/d1/f3: %q, want node1", got)
	}
	if got := h.getDir("/d2"); got != "node2" {
		t.Errorf("getDir /d2: %q, want its files' home node2", got)
	}
	h.forget("/d1/f3")
	if got := h.get("/d1/f4"); got != "" {
		t.Errorf("/d1/f4 after forgetting a sibling: %q, want unknown", got)
	}
}

// TestHomeCacheDirectories: a directory's home is its own entry, never its
// parent's files' home (placement colocate puts directories elsewhere
// than their siblings), and it is where its own entries are made and, until
// one of its files is seen, where its files are looked for.
func TestHomeCacheDirectories(t *testing.T) {
	h := newHomeCache(100)
	h.put("/p/sub", "node2", true)
	if got := h.get("/p/file"); got != "" {
		t.Errorf("/p/file after learning only the directory /p/sub: %q, want unknown", got)
	}
	if got := h.getDir("/p/sub"); got != "node2" {
		t.Errorf("getDir /p/sub: %q, want node2", got)
	}
	if got := h.get("/p/sub/first"); got != "node2" {
		t.Errorf("/p/sub/first, the first path seen in /p/sub: %q, want the directory's home node2", got)
	}
	h.put("/p/file", "node1", false)
	h.put("/p/sub2", "node1", true) // with the files: no entry of its own
	for p, want := range map[string]string{"/p/other": "node1", "/p/sub": "node2", "/p/sub2": "node1"} {
		if got := h.get(p); got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
}
