package fsimport

import (
	"strings"
	"testing"

	"github.com/ghba/ghba/rpc"
)

// TestBatcherTake checks which waiting directories one request takes: as
// many as fit in its entry and text bounds, always at least one.
func TestBatcherTake(t *testing.T) {
	dir := func(entries, textEach int) *dirJob {
		j := &dirJob{}
		for range entries {
			j.req.Entries = append(j.req.Entries, rpc.BatchCreateEntry{Text: strings.Repeat("x", textEach)})
		}
		return j
	}
	for _, tc := range []struct {
		name       string
		jobs       []*dirJob
		want       int // jobs taken
		maxEntries int
		maxText    int
	}{
		{"all fit", []*dirJob{dir(3, 0), dir(4, 0), dir(3, 0)}, 3, 10, 100},
		{"entries bound", []*dirJob{dir(3, 0), dir(4, 0), dir(4, 0)}, 2, 10, 100},
		{"text bound", []*dirJob{dir(2, 30), dir(2, 30), dir(1, 10)}, 1, 10, 100},
		{"a first directory over the bound goes alone", []*dirJob{dir(12, 0), dir(1, 0)}, 1, 10, 100},
		{"one waiting", []*dirJob{dir(1, 0)}, 1, 10, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &batcher{maxEntries: tc.maxEntries, maxText: tc.maxText, pending: tc.jobs}
			got := b.take()
			if len(got) != tc.want || len(b.pending) != len(tc.jobs)-tc.want {
				t.Fatalf("took %d, left %d; want %d taken of %d", len(got), len(b.pending), tc.want, len(tc.jobs))
			}
			for i, j := range got {
				if j != tc.jobs[i] {
					t.Errorf("job %d out of order", i)
				}
			}
		})
	}
}
