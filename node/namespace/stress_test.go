package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// fsck checks the cluster's structure from the stores: every inode but "/"
// has exactly one entry, in its parent's directory at the parent's home,
// that names its home and type; every entry names an inode at that home;
// nothing is prepared or marked.
func fsck(c *nodetest.Namespaces, t testing.TB) int {
	t.Helper()
	ctx := context.Background()
	type loc struct {
		home string
		typ  store.FileType
	}
	inodes := map[string]loc{}
	for _, id := range c.IDs {
		nd := c.Nodes[id]
		if !nd.Running {
			continue
		}
		err := nd.Store.ScanInodes(ctx, func(p string, ino store.Inode) error {
			if o, dup := inodes[p]; dup {
				t.Errorf("fsck: %s homed on %s and %s", p, o.home, id)
			}
			inodes[p] = loc{id, ino.Type}
			return nil
		})
		mustOK(t, err, "scan %s", id)
		if m := nd.NS.Marks(); len(m) > 0 {
			t.Errorf("fsck: %s still has marks %v", id, m)
		}
		ins, err := nd.Store.ListIntents(ctx)
		mustOK(t, err, "intents")
		for _, in := range ins {
			if in.ID[:2] == namespace.PartPrefix {
				t.Errorf("fsck: %s holds prepared part %s", id, in.ID)
			}
		}
	}
	entries := 0
	for p, l := range inodes {
		if l.typ != store.TypeDir {
			continue
		}
		ents, _, err := c.Nodes[l.home].Store.ReadDir(ctx, p, "", 0)
		mustOK(t, err, "readdir %s", p)
		for _, e := range ents {
			entries++
			q := namespace.JoinPath(p, e.Name)
			cl, ok := inodes[q]
			switch {
			case !ok:
				t.Errorf("fsck: entry %s -> %s has no inode", q, e.Home)
			case cl.home != e.Home:
				t.Errorf("fsck: entry %s -> %s, inode on %s", q, e.Home, cl.home)
			case cl.typ != e.Type:
				t.Errorf("fsck: entry %s type %v, inode %v", q, e.Type, cl.typ)
			}
		}
	}
	for p, l := range inodes {
		if p == "/" {
			continue
		}
		dir, name := namespace.SplitPath(p)
		pl, ok := inodes[dir]
		if !ok {
			t.Errorf("fsck: %s (on %s) has no parent inode", p, l.home)
			continue
		}
		if pl.typ != store.TypeDir {
			t.Errorf("fsck: %s (on %s) is inside file %s (on %s)", p, l.home, dir, pl.home)
		}
		if _, err := c.Nodes[pl.home].Store.GetEntry(ctx, dir, name); err != nil {
			t.Errorf("fsck: %s (on %s) has no entry in %s: %v", p, l.home, dir, err)
		}
	}
	if entries != len(inodes)-1 {
		t.Errorf("fsck: %d entries for %d inodes", entries, len(inodes))
	}
	return len(inodes)
}

// TestConcurrentStress runs random operations on a small set of names from
// several goroutines through every node at once (creates, directory
// renames over each other, removals racing with creates inside), then
// checks the structure and that every node answers alike.
func TestConcurrentStress(t *testing.T) {
	for _, placement := range []string{namespace.PlacementBalanced, namespace.PlacementParent, namespace.PlacementColocate} {
		t.Run(placement, func(t *testing.T) {
			stress(t, nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Placement: placement}))
		})
	}
}

func stress(t *testing.T, c *nodetest.Namespaces) {
	ops := 2000
	if testing.Short() {
		ops = 400
	}
	const workers = 8
	names := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	slow := map[string]time.Duration{}
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			path := func() string {
				p := ""
				for range 1 + r.IntN(3) {
					p += "/" + names[r.IntN(len(names))]
				}
				return p
			}
			for range ops / workers {
				o := via(c, c.IDs[r.IntN(len(c.IDs))])
				t0 := time.Now()
				var err error
				var what string
				switch k := r.IntN(10); {
				case k < 3:
					what, err = "create", o.create(path())
				case k < 5:
					what, err = "mkdir", o.mkdir(path(), false)
				case k < 7:
					what, err = "rename", o.rename(path(), path())
				case k < 8:
					what, err = "unlink", o.unlink(path())
				case k < 9:
					what, err = "rmdir", o.rmdir(path())
				default:
					what = "stat"
					_, err = o.stat(path())
				}
				kind := errKind(err)
				if errors.Is(err, rpc.ErrUnavailable) {
					// Allowed only as "busy" (a transaction that lost
					// every retry against conflicting ones).
					kind = "busy"
				}
				d := time.Since(t0)
				mu.Lock()
				counts[what+" "+kind]++
				if d > slow[what] {
					slow[what] = d
				}
				mu.Unlock()
				if len(kind) > 6 && kind[:6] == "other:" {
					t.Errorf("%s: %v", what, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d ops by %d workers in %v: %v", ops, workers, time.Since(start), counts)
	t.Logf("slowest: %v", slow)
	c.SettleAll()
	n := fsck(c, t)
	t.Logf("fsck: %d inodes", n)
	// Every node agrees on every directory's listing.
	var walk func(p string)
	walk = func(p string) {
		var want []string
		for i, id := range c.IDs {
			got, err := via(c, id).names(p)
			mustOK(t, err, "readdir %s via %s", p, id)
			if i == 0 {
				want = got
			} else if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("readdir %s: %v via %s, %v via %s", p, got, id, want, c.IDs[0])
			}
		}
		for _, name := range want {
			if name[len(name)-1] == '/' {
				walk(namespace.JoinPath(p, name[:len(name)-1]))
			}
		}
	}
	walk("/")
}
