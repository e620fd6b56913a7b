package tasks

import (
	"sync/atomic"
	"testing"
)

func TestGroupRunsAndRefusesAfterClose(t *testing.T) {
	var g Group
	var ran atomic.Int32
	release := make(chan struct{})
	for range 3 {
		if !g.Go(func() { <-release; ran.Add(1) }) {
			t.Fatal("Go refused before Close")
		}
	}
	g.Close()
	if g.Go(func() { ran.Add(100) }) {
		t.Fatal("Go ran after Close")
	}
	if !g.Closed() {
		t.Fatal("Closed() = false after Close")
	}
	close(release)
	g.Wait()
	if got := ran.Load(); got != 3 {
		t.Fatalf("ran %d goroutines, want 3", got)
	}
}

func TestForEachBoundsConcurrency(t *testing.T) {
	var running, peak, calls atomic.Int32
	seen := make([]atomic.Bool, 50)
	ForEach(len(seen), 4, func(i int) {
		cur := running.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		seen[i].Store(true)
		calls.Add(1)
		running.Add(-1)
	})
	if calls.Load() != 50 {
		t.Fatalf("calls = %d, want 50", calls.Load())
	}
	for i := range seen {
		if !seen[i].Load() {
			t.Fatalf("index %d not called", i)
		}
	}
	if p := peak.Load(); p > 4 {
		t.Fatalf("%d calls at once, limit 4", p)
	}
}
