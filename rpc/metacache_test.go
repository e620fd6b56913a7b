package rpc

import (
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/nexus"
)

// TestPrefetchGroup checks the prefetch group of a miss: the predictor's
// strongest successors up to its window (the paper's group), then a walk
// of the graph from the last path added, less what the cache holds.
func TestPrefetchGroup(t *testing.T) {
	seq := []string{"/a", "/b", "/c", "/d", "/e", "/f", "/g", "/h", "/i", "/j", "/k", "/l"}
	cases := []struct {
		name   string
		group  int
		cached []string
		want   []string
	}{
		{name: "paper's group of two", group: 2, want: []string{"/b", "/c"}},
		{name: "the window's successors", group: 3, want: []string{"/b", "/c", "/d"}},
		{name: "walked past the window", group: 8, want: []string{"/b", "/c", "/d", "/e", "/f", "/g", "/h", "/i"}},
		{name: "to the end of what was seen", group: 40, want: seq[1:]},
		{name: "cached paths count but are not fetched", group: 4, cached: []string{"/c", "/d"}, want: []string{"/b", "/e"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := nexus.New[string](nexus.Config{Window: 3})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range seq {
				g.Access(p)
			}
			m := newMetaCache(CacheOptions{Prefetch: PrefetchNexus, Predictor: g, Group: tc.group})
			for _, p := range tc.cached {
				m.install(p, &StatResponse{Lease: int64(time.Minute)}, time.Now(), m.generation(), false)
			}
			if got := m.successors("/a"); !slices.Equal(got, tc.want) {
				t.Errorf("successors(/a) with group %d = %v, want %v", tc.group, got, tc.want)
			}
		})
	}
}
