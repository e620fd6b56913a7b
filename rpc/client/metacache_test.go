package client

import (
	"errors"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/routing/nexus"
	"github.com/ghba/ghba/rpc"
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
				m.install(p, &rpc.BatchStatResult{Stat: &rpc.StatResponse{Lease: int64(time.Minute)}}, time.Now(), m.generation(), false)
			}
			if got := m.successors("/a"); !slices.Equal(got, tc.want) {
				t.Errorf("successors(/a) with group %d = %v, want %v", tc.group, got, tc.want)
			}
		})
	}
}

// TestCacheAnswers: the cache holds an inode or a path's absence under the
// lease its answer carries, answers a stat of it until the lease ends or a
// node's notice drops it, and holds nothing without a lease or for any
// other error.
func TestCacheAnswers(t *testing.T) {
	lease := int64(time.Minute)
	cases := []struct {
		name       string
		res        rpc.BatchStatResult
		cached     bool
		wantAbsent bool
	}{
		{"inode under a lease", rpc.BatchStatResult{Stat: &rpc.StatResponse{Inode: rpc.Inode{Path: "/p", Mode: 0o600}, Lease: lease}}, true, false},
		{"inode without a lease", rpc.BatchStatResult{Stat: &rpc.StatResponse{Inode: rpc.Inode{Path: "/p"}}}, false, false},
		{"absence under a lease", rpc.BatchStatResult{Code: rpc.CodeNotExist, Message: "/p: file does not exist", Lease: lease}, true, true},
		{"absence without a lease", rpc.BatchStatResult{Code: rpc.CodeNotExist, Message: "/p: file does not exist"}, false, false},
		{"another error", rpc.BatchStatResult{Code: rpc.CodeUnavailable, Message: "down", Lease: lease}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetaCache(CacheOptions{})
			now := time.Now()
			m.install("/p", &tc.res, now, m.generation(), false)
			st, hit, _, err := m.lookup("/p", now)
			if hit != tc.cached {
				t.Fatalf("hit %v, want %v", hit, tc.cached)
			}
			if !hit {
				return
			}
			switch {
			case tc.wantAbsent && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("cached absence answered %v, %+v", err, st)
			case !tc.wantAbsent && (err != nil || st.Mode != 0o600 || st.Level != rpc.LevelCache):
				t.Errorf("cached inode answered %v, %+v", err, st)
			}
			if _, hit, _, _ := m.lookup("/p", now.Add(time.Duration(lease))); hit {
				t.Error("answered after its lease ended")
			}
			m.install("/p", &tc.res, now, m.generation(), false)
			m.invalidate(&rpc.Invalidation{Paths: []string{"/p"}})
			if _, hit, _, _ := m.lookup("/p", now); hit {
				t.Error("answered after the node's notice")
			}
		})
	}
}
