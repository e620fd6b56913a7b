package rpc

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
		h.put(fmt.Sprint("/p", i), "addr")
	}
	if n := cacheLen(h); n > 100 {
		t.Errorf("cache holds %d entries, bound 100", n)
	}
	if h.get("/p999") != "addr" {
		t.Error("recent entry missing")
	}
	if h.get("/p0") != "" {
		t.Error("old entry kept")
	}
	h.forget("/p999")
	if h.get("/p999") != "" {
		t.Error("forgotten entry kept")
	}
	var off *homeCache = newHomeCache(-1)
	off.put("/a", "x")
	if off.get("/a") != "" || cacheLen(off) != 0 {
		t.Error("disabled cache stores")
	}
}
