package mount

import (
	"fmt"
	"testing"
	"time"
)

// TestOwnChanges: noted paths are recent; paths older than the window are
// dropped once the map reaches its pruning size, which then follows what
// is left.
func TestOwnChanges(t *testing.T) {
	var o ownChanges
	for i := range 3 * minOwnPrune {
		o.note(fmt.Sprintf("/new/%d", i))
	}
	for _, p := range []string{"/new/0", fmt.Sprintf("/new/%d", 3*minOwnPrune-1)} {
		if !o.recent(p) {
			t.Errorf("%s noted just now is not recent", p)
		}
	}
	if o.recent("/never") {
		t.Error("a path never noted is recent")
	}
	// Age every entry past the window: the next pruning drops them all.
	o.mu.Lock()
	for p := range o.at {
		o.at[p] = time.Now().Add(-2 * ownChangeWindow)
	}
	o.pruneAt = len(o.at)
	o.mu.Unlock()
	if o.recent("/new/0") {
		t.Error("a path noted before the window is recent")
	}
	o.note("/fresh")
	o.mu.Lock()
	n, at := len(o.at), o.pruneAt
	o.mu.Unlock()
	if n != 1 || at != 0 {
		t.Errorf("after pruning: %d paths, next pruning at %d; want 1 and 0 (that is, at %d)", n, at, minOwnPrune)
	}
	if !o.recent("/fresh") {
		t.Error("the path noted at the pruning is not recent")
	}
}

// BenchmarkOwnChangesNote notes distinct paths with 5,000 of them inside
// the window, as 16 processes creating files through a mount keep it.
func BenchmarkOwnChangesNote(b *testing.B) {
	var o ownChanges
	paths := make([]string, 5000)
	for i := range paths {
		paths[i] = fmt.Sprintf("/bench/d%d/f%d", i%50, i)
		o.note(paths[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		o.note(paths[i%len(paths)])
	}
}
