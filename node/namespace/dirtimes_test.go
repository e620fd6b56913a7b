package namespace_test

import (
	"context"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// TestDirectoryTimes checks that a directory's modification and change
// times follow its entries (docs/design.md, "Directory times") for every
// operation that changes them, at R=1 and R=3: they move to the time of
// the change, on the directories it changed and on no other, and the
// directory's version stays.
func TestDirectoryTimes(t *testing.T) { forEachR(t, testDirectoryTimes) }

func testDirectoryTimes(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	o := via(c, c.IDs[0])
	for _, d := range []string{"/a", "/b"} {
		if err := o.mkdir(d, false); err != nil {
			t.Fatal(err)
		}
	}
	stat := func(p string) *rpc.StatResponse {
		t.Helper()
		st, err := o.stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		return st
	}
	steps := []struct {
		name    string
		op      func() error
		changed []string // the directories whose times must move
	}{
		{"create", func() error { return o.create("/a/f") }, []string{"/a"}},
		{"mkdir", func() error { return o.mkdir("/a/d", false) }, []string{"/a"}},
		{"rename in its directory", func() error { return o.rename("/a/f", "/a/g") }, []string{"/a"}},
		{"rename to another directory", func() error { return o.rename("/a/g", "/b/g") }, []string{"/a", "/b"}},
		{"rename a directory to another", func() error { return o.rename("/a/d", "/b/d") }, []string{"/a", "/b"}},
		{"unlink", func() error { return o.unlink("/b/g") }, []string{"/b"}},
		{"rmdir", func() error { return o.rmdir("/b/d") }, []string{"/b"}},
	}
	dirs := []string{"/", "/a", "/b"}
	for _, s := range steps {
		before := map[string]*rpc.StatResponse{}
		for _, d := range dirs {
			before[d] = stat(d)
		}
		start := time.Now()
		if err := s.op(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		end := time.Now()
		for _, d := range dirs {
			b, a := before[d], stat(d)
			if a.Version != b.Version {
				t.Errorf("%s: %s version %d -> %d", s.name, d, b.Version, a.Version)
			}
			changed := false
			for _, c := range s.changed {
				changed = changed || c == d
			}
			switch {
			case !changed && (a.Mtime != b.Mtime || a.Ctime != b.Ctime):
				t.Errorf("%s: %s, unchanged, has times %d %d, had %d %d", s.name, d, a.Mtime, a.Ctime, b.Mtime, b.Ctime)
			case changed && (a.Mtime < start.UnixNano() || a.Mtime > end.UnixNano() || a.Ctime != a.Mtime):
				t.Errorf("%s: %s has mtime %d ctime %d, want one time within [%d, %d]", s.name, d, a.Mtime, a.Ctime, start.UnixNano(), end.UnixNano())
			}
		}
	}
}

// TestDirectoryTimesCachedByTheWriter checks that a client holding a
// directory in its metadata cache sees the directory's new time after it
// changed the directory's entries itself: the cluster revokes no lease for
// a directory's times, so the writer drops its own copy.
func TestDirectoryTimesCachedByTheWriter(t *testing.T) {
	c := cacheCluster(t, 3)
	cl := cachingClient(t, c, nil)
	ctx := context.Background()
	if _, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: "/d", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	for i, op := range []func(p string) error{
		func(p string) error { _, err := cl.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644}); return err },
		func(p string) error { return cl.Unlink(ctx, p) },
	} {
		before := cached(t, cl, "/d")
		if err := op("/d/f"); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		after, err := cl.Stat(ctx, "/d")
		if err != nil {
			t.Fatal(err)
		}
		if after.Mtime <= before.Mtime {
			t.Errorf("op %d: the writer's stat of /d has mtime %d, had %d before its change", i, after.Mtime, before.Mtime)
		}
	}
}
