package namespace_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestDirectoryLinks checks that a directory's link count is 2 plus its
// subdirectories (docs/design.md, "Directory link counts") after every
// operation that changes them, at R=1 and R=3, with parents and children
// homed on different shards (the balanced placement).
func TestDirectoryLinks(t *testing.T) { forEachR(t, testDirectoryLinks) }

func testDirectoryLinks(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	o := via(c, c.IDs[0])
	root := func() uint32 {
		st, err := o.stat("/")
		if err != nil {
			t.Fatal(err)
		}
		return st.Inode.Nlink
	}
	base := root() // "/" may hold the cluster's own directories
	steps := []struct {
		name string
		op   func() error
		want map[string]uint32
	}{
		{"mkdir", func() error { return o.mkdir("/a", false) }, map[string]uint32{"/": base + 1, "/a": 2}},
		{"mkdir in it", func() error { return o.mkdir("/a/d", false) }, map[string]uint32{"/": base + 1, "/a": 3, "/a/d": 2}},
		{"a file is no link", func() error { return o.create("/a/f") }, map[string]uint32{"/a": 3}},
		{"mkdir -p", func() error { return o.mkdir("/b/c/e", true) }, map[string]uint32{"/": base + 2, "/b": 3, "/b/c": 3, "/b/c/e": 2}},
		{"rename a directory within its parent", func() error { return o.rename("/a/d", "/a/d2") }, map[string]uint32{"/a": 3}},
		{"rename a directory to another parent", func() error { return o.rename("/a/d2", "/b/d") }, map[string]uint32{"/a": 2, "/b": 4}},
		{"rename a directory with subdirectories", func() error { return o.rename("/b/c", "/a/c") }, map[string]uint32{"/a": 3, "/b": 3, "/a/c": 3}},
		{"rename a directory over an empty one", func() error { return o.rename("/a/c", "/b/d") }, map[string]uint32{"/a": 2, "/b": 3, "/b/d": 3}},
		{"a file renamed is no link", func() error { return o.rename("/a/f", "/b/f") }, map[string]uint32{"/a": 2, "/b": 3}},
		{"rmdir", func() error { return o.rmdir("/b/d/e") }, map[string]uint32{"/b/d": 2}},
		{"rmdir again", func() error { return o.rmdir("/b/d") }, map[string]uint32{"/b": 2, "/": base + 2}},
	}
	for _, s := range steps {
		if err := s.op(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		for p, want := range s.want {
			st, err := o.stat(p)
			if err != nil {
				t.Fatalf("%s: stat %s: %v", s.name, p, err)
			}
			if st.Inode.Nlink != want {
				t.Errorf("%s: %s has %d links, want %d", s.name, p, st.Inode.Nlink, want)
			}
		}
	}
	// Every shard's pass over the directories made before link counts
	// were kept (none here) has finished, and changed nothing.
	for _, s := range c.IDs { // a shard per node, named as its owner
		rpctest.Eventually(t, 30*time.Second, "the pass of shard "+s, func() error {
			for _, n := range c.IDs {
				if c.NS(n).LinksCounted(s) {
					return nil
				}
			}
			return fmt.Errorf("no leader of shard %s has counted", s)
		})
	}
	if got := root(); got != base+2 {
		t.Errorf("/ has %d links after the passes, want %d", got, base+2)
	}
}
