package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// nsTree creates dirs /d0../d{nd-1}, each with files f0..f{nf-1} and a
// subdirectory s holding one file, through rotating nodes, and returns
// every path created (model: path → is dir).
func nsTree(t testing.TB, c *nodetest.Namespaces, prefix string, nd, nf int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if prefix != "" {
		mustOK(t, via(c, c.IDs[0]).mkdir(prefix, true), "mkdir %s", prefix)
		out[prefix] = true
	}
	k := 0
	next := func() nsOps { k++; return via(c, c.IDs[k%len(c.IDs)]) }
	for i := range nd {
		d := fmt.Sprintf("%s/d%d", prefix, i)
		mustOK(t, next().mkdir(d, false), "mkdir %s", d)
		out[d] = true
		for j := range nf {
			f := fmt.Sprintf("%s/f%d", d, j)
			mustOK(t, next().create(f), "create %s", f)
			out[f] = false
		}
		s := d + "/s"
		mustOK(t, next().mkdir(s, false), "mkdir %s", s)
		out[s] = true
		mustOK(t, next().create(s+"/x"), "create %s/x", s)
		out[s+"/x"] = false
	}
	return out
}

// checkTree stats every path through every running node.
func checkTree(c *nodetest.Namespaces, t testing.TB, tree map[string]bool) {
	t.Helper()
	for _, id := range c.IDs {
		if !c.Nodes[id].Running {
			continue
		}
		for p, isDir := range tree {
			st, err := via(c, id).stat(p)
			if err != nil {
				t.Errorf("stat %s via %s: %v", p, id, err)
				continue
			}
			if st.IsDir() != isDir {
				t.Errorf("stat %s via %s: dir=%v", p, id, st.IsDir())
			}
		}
	}
}

// homes returns the home of each path (looked up through n1's client).
func homes(c *nodetest.Namespaces, t testing.TB, tree map[string]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p := range tree {
		var r rpc.LookupResponse
		mustOK(t, via(c, c.IDs[0]).call(rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r), "lookup %s", p)
		out[p] = r.Home
	}
	return out
}

// TestRestartKeepsWrites restarts every node in turn (its store closed and
// reopened): every acknowledged write is still there and served through
// every node, and the namespace keeps working.
func TestRestartKeepsWrites(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	tree := nsTree(t, c, "/r", 6, 5)
	mustOK(t, via(c, "n2").rename("/r/d0", "/r/moved"), "rename")
	for p, d := range tree {
		if namespace.IsUnder(p, "/r/d0") {
			delete(tree, p)
			tree[namespace.Rebase(p, "/r/d0", "/r/moved")] = d
		}
	}
	mustOK(t, via(c, "n3").unlink("/r/d1/f0"), "unlink")
	delete(tree, "/r/d1/f0")
	c.SettleAll()
	for _, id := range c.IDs {
		c.Restart(id)
		checkTree(c, t, tree)
	}
	c.WaitFilters()
	checkTree(c, t, tree)
	mustOK(t, via(c, "n1").create("/r/after"), "create after restart")
	if err := via(c, "n2").create("/r/d1/f1"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create existing after restart: %v", err)
	}
	// A whole-cluster restart.
	for _, id := range c.IDs {
		c.Stop(id)
	}
	for _, id := range c.IDs {
		c.Start(id)
	}
	tree["/r/after"] = false
	checkTree(c, t, tree)
	names, err := via(c, "n3").names("/r/moved")
	mustOK(t, err, "readdir")
	if want := []string{"f0", "f1", "f2", "f3", "f4", "s/"}; !slices.Equal(names, want) {
		t.Errorf("readdir /r/moved = %v", names)
	}
}

// TestDownNode: while a node is down (the Directory marks it failed and its
// server is closed) its paths answer unavailable, never "does not exist";
// paths elsewhere are served; when it comes back everything is.
func TestDownNode(t *testing.T) {
	// The "unreachable" phase keeps the down node up in the Directory: a
	// request for its shard waits for a leader (LeaderWait) before it
	// answers unavailable; a short wait keeps the many checks quick.
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Tuning: namespace.Tuning{LeaderWait: 50 * time.Millisecond}})
	tree := nsTree(t, c, "", 8, 4)
	homes := homes(c, t, tree)
	c.WaitFilters()
	const down = "n3"
	var onDown, elsewhere []string
	for p, h := range homes {
		if h == down {
			onDown = append(onDown, p)
		} else {
			elsewhere = append(elsewhere, p)
		}
	}
	sort.Strings(onDown)
	if len(onDown) == 0 {
		t.Fatal("nothing homed on n3")
	}
	check := func(phase string) {
		for _, id := range []string{"n1", "n2"} {
			o := via(c, id)
			for _, p := range onDown {
				_, err := o.stat(p)
				if !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s: stat %s (home %s) via %s: %v, want unavailable", phase, p, down, id, err)
				}
			}
			for _, p := range elsewhere {
				// Served, unless an ancestor lives on the down node and the
				// path's own filters missed (then unavailable is right too).
				if _, err := o.stat(p); err != nil && !errors.Is(err, rpc.ErrUnavailable) {
					t.Errorf("%s: stat %s via %s: %v", phase, p, id, err)
				} else if err != nil && !ancestorOn(c, homes, p, down) {
					t.Errorf("%s: stat %s via %s: %v although no ancestor is on %s", phase, p, id, err, down)
				}
			}
			// Names that do not exist, under directories on the down node:
			// unavailable; under live directories: does not exist.
			for _, p := range onDown {
				if !tree[p] {
					continue
				}
				if _, err := o.stat(p + "/nope"); !errors.Is(err, rpc.ErrUnavailable) {
					t.Errorf("%s: stat %s/nope via %s: %v, want unavailable", phase, p, id, err)
				}
				if err := o.create(p + "/new"); !errors.Is(err, rpc.ErrUnavailable) {
					t.Errorf("%s: create under %s via %s: %v, want unavailable", phase, p, id, err)
				}
				if _, err := o.readdir(p, "", 0); !errors.Is(err, rpc.ErrUnavailable) {
					t.Errorf("%s: readdir %s via %s: %v, want unavailable", phase, p, id, err)
				}
			}
			for i, p := range elsewhere {
				if tree[p] && !ancestorOn(c, homes, p, down) {
					if _, err := o.stat(p + "/nope"); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s: stat %s/nope via %s: %v, want not exist", phase, p, id, err)
					}
					// New files under live directories are placed on live
					// nodes (a placement on the unreachable node is redone).
					q := fmt.Sprintf("%s/new-%s-%s-%d", p, phase, id, i)
					if err := o.create(q); err != nil {
						t.Errorf("%s: create %s via %s: %v", phase, q, id, err)
					} else if h := homeOf(c, t, q); h == down {
						t.Errorf("%s: %s placed on the down node", phase, q)
					}
				}
			}
		}
	}
	// Failed in the Directory, server closed.
	c.Stop(down)
	check("failed")
	// The Directory still says up, but nothing answers.
	c.Dir.Update(down, func(p *namespace.Peer) { p.Up = true })
	check("unreachable")
	c.Dir.Update(down, func(p *namespace.Peer) { p.Up = false })
	// Forget the filters (a node that joined after the failure): the L4
	// path (parents' entries, broadcast) must still never say "not exist".
	for _, id := range []string{"n1", "n2"} {
		c.NS(id).DropReplicas()
	}
	check("no filters")
	c.Start(down)
	c.WaitFilters()
	checkTree(c, t, tree)
	c.SettleAll()
	fsck(c, t)
}

// ancestorOn reports whether some ancestor of p is homed on node.
func ancestorOn(c *nodetest.Namespaces, homes map[string]string, p, node string) bool {
	for q := parentOf(p); ; q = parentOf(q) {
		h, ok := homes[q]
		if q == "/" {
			return c.Dir.Root() == node
		}
		if ok && h == node {
			return true
		}
	}
}

var nsSeq atomic.Int64

// crashHook arms a coordinator's crash hook once at point.
func crashHook(ns *namespace.Namespace, point string, before func()) *atomic.Bool {
	armed := new(atomic.Bool)
	h := func(p, txn string) bool {
		if p != point || !armed.CompareAndSwap(true, false) {
			return false
		}
		if before != nil {
			before()
			return false
		}
		return true
	}
	ns.SetCrashHook(h)
	return armed
}

// createRemoteChild creates files in dir through the dir's home until one
// goes through the two-phase path (the hook fires: the create fails with
// the simulated crash) and returns it.
func createRemoteChild(t *testing.T, c *nodetest.Namespaces, home, dir string, armed *atomic.Bool) (string, error) {
	t.Helper()
	armed.Store(true)
	for range 50 {
		p := fmt.Sprintf("%s/c%d", dir, nsSeq.Add(1))
		err := via(c, home).create(p)
		if !armed.Load() {
			return p, err
		}
		mustOK(t, err, "create %s", p)
	}
	t.Fatal("no create went to another node")
	return "", nil
}

func homeOf(c *nodetest.Namespaces, t testing.TB, p string) string {
	var r rpc.LookupResponse
	mustOK(t, via(c, c.IDs[0]).call(rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r), "lookup %s", p)
	return r.Home
}

// TestCrashAfterCommitPoint: the coordinator dies after its commit point,
// before telling the child's home. A reader that meets the prepared child
// resolves it with the coordinator; after a restart the coordinator
// delivers the commit itself.
func TestCrashAfterCommitPoint(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	mustOK(t, via(c, "n1").mkdir("/t", false), "mkdir")
	p := homeOf(c, t, "/t")
	armed := crashHook(c.NS(p), namespace.HookCommitted, nil)
	x, err := createRemoteChild(t, c, p, "/t", armed)
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed create: %v", err)
	}
	// The commit point passed: every reader sees the file.
	for _, id := range c.IDs {
		if _, err := via(c, id).stat(x); err != nil {
			t.Errorf("stat %s via %s after the commit point: %v", x, id, err)
		}
	}
	// Same again, then restart the coordinator before anyone reads.
	y, err := createRemoteChild(t, c, p, "/t", armed)
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed create: %v", err)
	}
	c.Restart(p)
	c.SettleAll()
	for _, id := range c.IDs {
		if _, err := via(c, id).stat(y); err != nil {
			t.Errorf("stat %s via %s after the coordinator's restart: %v", y, id, err)
		}
	}
	names, err := via(c, "n2").names("/t")
	mustOK(t, err, "readdir")
	if !slices.Contains(names, x[len("/t/"):]) || !slices.Contains(names, y[len("/t/"):]) {
		t.Errorf("readdir /t = %v", names)
	}
}

// TestCrashBeforeCommitPoint: the coordinator dies after the child's home
// prepared, before its commit point: the file never appears, the child's
// home discards its part once it learns the coordinator has no record, and
// the name can be created again.
func TestCrashBeforeCommitPoint(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	mustOK(t, via(c, "n1").mkdir("/t", false), "mkdir")
	p := homeOf(c, t, "/t")
	armed := crashHook(c.NS(p), namespace.HookPrepared, nil)
	x, err := createRemoteChild(t, c, p, "/t", armed)
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed create: %v", err)
	}
	for _, id := range c.IDs {
		if _, err := via(c, id).stat(x); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s via %s before the commit point: %v, want not exist", x, id, err)
		}
	}
	c.Restart(p)
	c.SettleAll()
	for _, id := range c.IDs {
		if _, err := via(c, id).stat(x); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s via %s after abort: %v", x, id, err)
		}
	}
	mustOK(t, via(c, "n3").create(x), "create again")
	for _, id := range c.IDs {
		if _, err := via(c, id).stat(x); err != nil {
			t.Errorf("stat %s via %s: %v", x, id, err)
		}
	}
}

// TestParticipantCrash: the child's home dies after preparing; the
// coordinator commits, cannot deliver, and delivers after the restart.
// While it is down the file answers unavailable.
func TestParticipantCrash(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	mustOK(t, via(c, "n1").mkdir("/t", false), "mkdir")
	p := homeOf(c, t, "/t")
	var victim string
	armed := crashHook(c.NS(p), namespace.HookCommitted, func() {
		// Stop every node other than the coordinator that holds a part.
		for _, id := range c.IDs {
			if id != p {
				if parts, _, _ := c.NS(id).Pending(); parts > 0 {
					victim = id
					c.Stop(id)
				}
			}
		}
	})
	armed.Store(true)
	var x string
	for i := range 50 {
		x = fmt.Sprintf("/t/c%d", i)
		mustOK(t, via(c, p).create(x), "create %s", x)
		if !armed.Load() {
			break
		}
	}
	if victim == "" {
		t.Fatal("no participant stopped")
	}
	for _, id := range c.IDs {
		if id == victim {
			continue
		}
		if _, err := via(c, id).stat(x); !errors.Is(err, rpc.ErrUnavailable) {
			t.Errorf("stat %s via %s while its home is down: %v", x, id, err)
		}
	}
	c.Start(victim)
	c.SettleAll()
	for _, id := range c.IDs {
		if _, err := via(c, id).stat(x); err != nil {
			t.Errorf("stat %s via %s after restart: %v", x, id, err)
		}
	}
}

// TestDirRenameCrash: a directory rename whose coordinator dies after the
// commit point, then a participant dies before it re-keys; everything ends
// renamed, with nothing lost.
func TestDirRenameCrash(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	tree := nsTree(t, c, "/src", 4, 3)
	mustOK(t, via(c, "n2").mkdir("/dst", false), "mkdir")
	p := homeOf(c, t, "/")
	armed := crashHook(c.NS(p), namespace.HookCommitted, nil)
	armed.Store(true)
	if err := via(c, p).rename("/src", "/dst/moved"); !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed rename: %v", err)
	}
	// Stop another node before it learns the outcome, then restart the
	// coordinator, then the other node.
	other := "n2"
	if other == p {
		other = "n3"
	}
	c.Stop(other)
	c.Restart(p)
	c.Start(other)
	c.SettleAll()
	want := map[string]bool{"/dst": true}
	for q, d := range tree {
		want[namespace.Rebase(q, "/src", "/dst/moved")] = d
	}
	c.WaitFilters()
	checkTree(c, t, want)
	for q := range tree {
		if _, err := via(c, "n1").stat(q); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s after rename: %v", q, err)
		}
	}
}
