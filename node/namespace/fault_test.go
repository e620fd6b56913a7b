package node

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/ghba/ghba/rpc"
)

// nsTree creates dirs /d0../d{nd-1}, each with files f0..f{nf-1} and a
// subdirectory s holding one file, through rotating nodes, and returns
// every path created (model: path → is dir).
func nsTree(t testing.TB, c *nsCluster, prefix string, nd, nf int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if prefix != "" {
		mustOK(t, c.via(c.ids[0]).mkdir(prefix, true), "mkdir %s", prefix)
		out[prefix] = true
	}
	k := 0
	next := func() nsOps { k++; return c.via(c.ids[k%len(c.ids)]) }
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
func (c *nsCluster) checkTree(t testing.TB, tree map[string]bool) {
	t.Helper()
	for _, id := range c.ids {
		if !c.nodes[id].running {
			continue
		}
		for p, isDir := range tree {
			st, err := c.via(id).stat(p)
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
func (c *nsCluster) homes(t testing.TB, tree map[string]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p := range tree {
		var r rpc.LookupResponse
		mustOK(t, c.via(c.ids[0]).call(rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r), "lookup %s", p)
		out[p] = r.Home
	}
	return out
}

// TestRestartKeepsWrites restarts every node in turn (its store closed and
// reopened): every acknowledged write is still there and served through
// every node, and the namespace keeps working.
func TestRestartKeepsWrites(t *testing.T) {
	c := newNSCluster(t, 3, nsTestConfig())
	tree := nsTree(t, c, "/r", 6, 5)
	mustOK(t, c.via("n2").rename("/r/d0", "/r/moved"), "rename")
	for p, d := range tree {
		if isUnder(p, "/r/d0") {
			delete(tree, p)
			tree[rebase(p, "/r/d0", "/r/moved")] = d
		}
	}
	mustOK(t, c.via("n3").unlink("/r/d1/f0"), "unlink")
	delete(tree, "/r/d1/f0")
	c.settleAll()
	for _, id := range c.ids {
		c.restartNode(id)
		c.checkTree(t, tree)
	}
	c.waitFilters()
	c.checkTree(t, tree)
	mustOK(t, c.via("n1").create("/r/after"), "create after restart")
	if err := c.via("n2").create("/r/d1/f1"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create existing after restart: %v", err)
	}
	// A whole-cluster restart.
	for _, id := range c.ids {
		c.stopNode(id)
	}
	for _, id := range c.ids {
		c.startNode(id, nil)
	}
	tree["/r/after"] = false
	c.checkTree(t, tree)
	names, err := c.via("n3").names("/r/moved")
	mustOK(t, err, "readdir")
	if want := []string{"f0", "f1", "f2", "f3", "f4", "s/"}; !slices.Equal(names, want) {
		t.Errorf("readdir /r/moved = %v", names)
	}
}

// TestDownNode: while a node is down (the Directory marks it failed and its
// server is closed) its paths answer unavailable, never "does not exist";
// paths elsewhere are served; when it comes back everything is.
func TestDownNode(t *testing.T) {
	c := newNSCluster(t, 3, nsTestConfig())
	tree := nsTree(t, c, "", 8, 4)
	homes := c.homes(t, tree)
	c.waitFilters()
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
			o := c.via(id)
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
				} else if err != nil && !c.ancestorOn(homes, p, down) {
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
				if tree[p] && !c.ancestorOn(homes, p, down) {
					if _, err := o.stat(p + "/nope"); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s: stat %s/nope via %s: %v, want not exist", phase, p, id, err)
					}
					// New files under live directories are placed on live
					// nodes (a placement on the unreachable node is redone).
					q := fmt.Sprintf("%s/new-%s-%s-%d", p, phase, id, i)
					if err := o.create(q); err != nil {
						t.Errorf("%s: create %s via %s: %v", phase, q, id, err)
					} else if h := c.homeOf(t, q); h == down {
						t.Errorf("%s: %s placed on the down node", phase, q)
					}
				}
			}
		}
	}
	// Failed in the Directory, server closed.
	c.stopNode(down)
	check("failed")
	// The Directory still says up, but nothing answers.
	c.state.update(down, func(p *Peer) { p.Up = true })
	check("unreachable")
	c.state.update(down, func(p *Peer) { p.Up = false })
	// Forget the filters (a node that joined after the failure): the L4
	// path (parents' entries, broadcast) must still never say "not exist".
	for _, id := range []string{"n1", "n2"} {
		ns := c.ns(id)
		ns.arrMu.Lock()
		for _, o := range ns.l1.IDs() {
			_ = ns.l1.Remove(o)
			_ = ns.l2.Remove(o)
		}
		ns.arrMu.Unlock()
	}
	check("no filters")
	c.startNode(down, nil)
	c.waitFilters()
	c.checkTree(t, tree)
	c.settleAll()
	c.fsck(t)
}

// ancestorOn reports whether some ancestor of p is homed on node.
func (c *nsCluster) ancestorOn(homes map[string]string, p, node string) bool {
	for q := parentOf(p); ; q = parentOf(q) {
		h, ok := homes[q]
		if q == "/" {
			return c.state.root == node
		}
		if ok && h == node {
			return true
		}
	}
}

var nsSeq atomic.Int64

// crashHook arms a coordinator's crash hook once at point.
func crashHook(ns *Namespace, point string, before func()) *atomic.Bool {
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
	ns.hook.Store(&h)
	return armed
}

// createRemoteChild creates files in dir through the dir's home until one
// goes through the two-phase path (the hook fires: the create fails with
// the simulated crash) and returns it.
func createRemoteChild(t *testing.T, c *nsCluster, home, dir string, armed *atomic.Bool) (string, error) {
	t.Helper()
	armed.Store(true)
	for range 50 {
		p := fmt.Sprintf("%s/c%d", dir, nsSeq.Add(1))
		err := c.via(home).create(p)
		if !armed.Load() {
			return p, err
		}
		mustOK(t, err, "create %s", p)
	}
	t.Fatal("no create went to another node")
	return "", nil
}

func (c *nsCluster) homeOf(t testing.TB, p string) string {
	var r rpc.LookupResponse
	mustOK(t, c.via(c.ids[0]).call(rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r), "lookup %s", p)
	return r.Home
}

// TestCrashAfterCommitPoint: the coordinator dies after its commit point,
// before telling the child's home. A reader that meets the prepared child
// resolves it with the coordinator; after a restart the coordinator
// delivers the commit itself.
func TestCrashAfterCommitPoint(t *testing.T) {
	c := newNSCluster(t, 3, nsTestConfig())
	mustOK(t, c.via("n1").mkdir("/t", false), "mkdir")
	p := c.homeOf(t, "/t")
	armed := crashHook(c.ns(p), hookCommitted, nil)
	x, err := createRemoteChild(t, c, p, "/t", armed)
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed create: %v", err)
	}
	// The commit point passed: every reader sees the file.
	for _, id := range c.ids {
		if _, err := c.via(id).stat(x); err != nil {
			t.Errorf("stat %s via %s after the commit point: %v", x, id, err)
		}
	}
	// Same again, then restart the coordinator before anyone reads.
	y, err := createRemoteChild(t, c, p, "/t", armed)
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed create: %v", err)
	}
	c.restartNode(p)
	c.settleAll()
	for _, id := range c.ids {
		if _, err := c.via(id).stat(y); err != nil {
			t.Errorf("stat %s via %s after the coordinator's restart: %v", y, id, err)
		}
	}
	names, err := c.via("n2").names("/t")
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
	c := newNSCluster(t, 3, nsTestConfig())
	mustOK(t, c.via("n1").mkdir("/t", false), "mkdir")
	p := c.homeOf(t, "/t")
	armed := crashHook(c.ns(p), hookPrepared, nil)
	x, err := createRemoteChild(t, c, p, "/t", armed)
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed create: %v", err)
	}
	for _, id := range c.ids {
		if _, err := c.via(id).stat(x); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s via %s before the commit point: %v, want not exist", x, id, err)
		}
	}
	c.restartNode(p)
	c.settleAll()
	for _, id := range c.ids {
		if _, err := c.via(id).stat(x); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s via %s after abort: %v", x, id, err)
		}
	}
	mustOK(t, c.via("n3").create(x), "create again")
	for _, id := range c.ids {
		if _, err := c.via(id).stat(x); err != nil {
			t.Errorf("stat %s via %s: %v", x, id, err)
		}
	}
}

// TestParticipantCrash: the child's home dies after preparing; the
// coordinator commits, cannot deliver, and delivers after the restart.
// While it is down the file answers unavailable.
func TestParticipantCrash(t *testing.T) {
	c := newNSCluster(t, 3, nsTestConfig())
	mustOK(t, c.via("n1").mkdir("/t", false), "mkdir")
	p := c.homeOf(t, "/t")
	var victim string
	armed := crashHook(c.ns(p), hookCommitted, func() {
		// Stop every node other than the coordinator that holds a part.
		for _, id := range c.ids {
			if id != p {
				if parts, _, _ := c.ns(id).pendingTxns(); parts > 0 {
					victim = id
					c.stopNode(id)
				}
			}
		}
	})
	armed.Store(true)
	var x string
	for i := range 50 {
		x = fmt.Sprintf("/t/c%d", i)
		mustOK(t, c.via(p).create(x), "create %s", x)
		if !armed.Load() {
			break
		}
	}
	if victim == "" {
		t.Fatal("no participant stopped")
	}
	for _, id := range c.ids {
		if id == victim {
			continue
		}
		if _, err := c.via(id).stat(x); !errors.Is(err, rpc.ErrUnavailable) {
			t.Errorf("stat %s via %s while its home is down: %v", x, id, err)
		}
	}
	c.startNode(victim, nil)
	c.settleAll()
	for _, id := range c.ids {
		if _, err := c.via(id).stat(x); err != nil {
			t.Errorf("stat %s via %s after restart: %v", x, id, err)
		}
	}
}

// TestDirRenameCrash: a directory rename whose coordinator dies after the
// commit point, then a participant dies before it re-keys; everything ends
// renamed, with nothing lost.
func TestDirRenameCrash(t *testing.T) {
	c := newNSCluster(t, 3, nsTestConfig())
	tree := nsTree(t, c, "/src", 4, 3)
	mustOK(t, c.via("n2").mkdir("/dst", false), "mkdir")
	p := c.homeOf(t, "/")
	armed := crashHook(c.ns(p), hookCommitted, nil)
	armed.Store(true)
	if err := c.via(p).rename("/src", "/dst/moved"); !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("crashed rename: %v", err)
	}
	// Stop another node before it learns the outcome, then restart the
	// coordinator, then the other node.
	other := "n2"
	if other == p {
		other = "n3"
	}
	c.stopNode(other)
	c.restartNode(p)
	c.startNode(other, nil)
	c.settleAll()
	want := map[string]bool{"/dst": true}
	for q, d := range tree {
		want[rebase(q, "/src", "/dst/moved")] = d
	}
	c.waitFilters()
	c.checkTree(t, want)
	for q := range tree {
		if _, err := c.via("n1").stat(q); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s after rename: %v", q, err)
		}
	}
}

// TestDrain drains a node (then the root's home): every path moves, none is
// lost, and the drained node can go.
func TestDrain(t *testing.T) {
	c := newNSCluster(t, 3, nsTestConfig())
	tree := nsTree(t, c, "/dr", 6, 6)
	tree["/"] = true
	c.settleAll()
	c.waitFilters()
	before := c.ns("n2").Stats()
	if before.Files+before.Dirs == 0 {
		t.Fatal("n2 homes nothing")
	}
	moved, err := c.ns("n2").Drain(nsCtx(t))
	mustOK(t, err, "drain n2")
	if moved != before.Files+before.Dirs {
		t.Errorf("drained %d, n2 homed %d", moved, before.Files+before.Dirs)
	}
	if s := c.ns("n2").Stats(); s.Files+s.Dirs != 0 {
		t.Errorf("n2 still homes %d files, %d dirs", s.Files, s.Dirs)
	}
	c.settleAll()
	c.checkTree(t, tree)
	// n2 takes no new homes while draining.
	for i := range 20 {
		p := fmt.Sprintf("/dr/new%d", i)
		mustOK(t, c.via("n2").create(p), "create %s", p)
		if h := c.homeOf(t, p); h == "n2" {
			t.Errorf("%s placed on the draining node", p)
		}
		tree[p] = false
	}
	c.stopNode("n2")
	c.checkTree(t, tree)
	// Drain the root's home too.
	moved, err = c.ns("n1").Drain(nsCtx(t))
	mustOK(t, err, "drain n1")
	to := c.ns("n1").RootMovedTo()
	if to == "" || moved == 0 {
		t.Fatalf("root not moved (moved %d)", moved)
	}
	c.checkTree(t, tree)
	c.stopNode("n1")
	c.checkTree(t, tree) // "/" found by broadcast while the Directory still names n1
	// The old root home restarts (the Directory still names it) and does
	// not create a second root.
	c.startNode("n1", nil)
	if _, err := c.nodes["n1"].st.GetInode(nsCtx(t), "/"); err == nil {
		t.Errorf("n1 recreated /")
	}
	c.checkTree(t, tree)
	c.state.mu.Lock()
	c.state.root = to
	c.state.mu.Unlock()
	c.state.notify()
	c.checkTree(t, tree)
}
