package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestDirRenameOverEmptyDirDuringHandOver renames directories over empty
// directories homed elsewhere while every shard's leadership moves
// between its replicas: afterwards the destination is the moved directory
// (its inode id, its child) and the source is gone, whatever leader
// change the rename's parts met.
func TestDirRenameOverEmptyDirDuringHandOver(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3, RaftTimeout: 2 * time.Second})
	for _, d := range []string{"/a", "/b"} {
		mustOK(t, via(c, "n1").mkdir(d, false), "mkdir %s", d)
	}
	l := &loadCheck{t: t, timeout: 60 * time.Second}
	halt := rpctest.Loop(t, 4, func(w, i int) {
		o := via(c, c.IDs[(w+i)%len(c.IDs)])
		x, y := fmt.Sprintf("/%c/x%d-%d", "ab"[i%2], w, i), fmt.Sprintf("/a/y%d-%d", w, i)
		for _, d := range []string{x, y} {
			if err := o.mkdir(d, false); err != nil {
				l.fail("mkdir %s: %v", d, err)
				return
			}
		}
		if err := o.create(x + "/f"); err != nil {
			l.fail("create %s/f: %v", x, err)
			return
		}
		st, err := o.stat(x)
		if err != nil {
			l.fail("stat %s: %v", x, err)
			return
		}
		if err := o.rename(x, y); err != nil {
			l.fail("rename %s %s: %v", x, y, err)
			return
		}
		for _, id := range c.IDs {
			o := via(c, id)
			got, err := o.stat(y)
			if err != nil {
				l.fail("stat %s via %s after the rename: %v", y, id, err)
				return
			}
			if got.Inode.ID != st.Inode.ID {
				l.fail("stat %s via %s: inode %d, want the moved %d", y, id, got.Inode.ID, st.Inode.ID)
			}
			if _, err := o.stat(y + "/f"); err != nil {
				l.fail("stat %s/f via %s: %v", y, id, err)
			}
			if _, err := o.stat(x); !errors.Is(err, fs.ErrNotExist) {
				l.fail("stat %s via %s after the rename: %v, want not exist", x, id, err)
			}
		}
		l.done.Add(1)
	})
	l.wait(10)
	for round := range 1 {
		for _, s := range c.IDs {
			for _, to := range c.IDs {
				if to == s {
					continue
				}
				if err := c.HandOver(s, to); err != nil {
					t.Fatalf("round %d: handing %s to %s: %v", round, s, to, err)
				}
				l.wait(3)
			}
			if err := c.HandOver(s, s); err != nil {
				t.Fatalf("round %d: handing %s back to its owner: %v", round, s, err)
			}
		}
	}
	halt()
	t.Logf("%d rounds, %d failed", l.done.Load(), l.failed.Load())
}

// TestDirRenameOverEmptyDirRollingRestart: as the hand-over test, but
// every node in turn hands its leaderships over and stops, and starts
// again (a rolling restart). A rename may fail (unavailable) while a
// shard has no leader; whatever its answer, afterwards exactly one of the
// two directories names the moved inode and every path answers.
func TestDirRenameOverEmptyDirRollingRestart(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	for _, d := range []string{"/a", "/b"} {
		mustOK(t, via(c, "n1").mkdir(d, false), "mkdir %s", d)
	}
	l := &loadCheck{t: t, timeout: 90 * time.Second}
	var unknown atomic.Int64
	var restarting atomic.Value
	restarting.Store("")
	pick := func(w, i int) nsOps {
		for k := range len(c.IDs) {
			id := c.IDs[(w+i+k)%len(c.IDs)]
			if id != restarting.Load().(string) {
				return via(c, id)
			}
		}
		return via(c, c.IDs[0])
	}
	// settle retries op while it answers unavailable (bounded).
	settle := func(what string, op func() error) error {
		var err error
		for range 150 {
			if err = op(); !errors.Is(err, rpc.ErrUnavailable) {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("%s: still unavailable after 30 s: %w", what, err)
	}
	halt := rpctest.Loop(t, 4, func(w, i int) {
		o := pick(w, i)
		x, y := fmt.Sprintf("/%c/x%d-%d", "ab"[i%2], w, i), fmt.Sprintf("/a/y%d-%d", w, i)
		for _, d := range []string{x, y} {
			if err := settle("mkdir", func() error {
				err := o.mkdir(d, false)
				if errors.Is(err, fs.ErrExist) {
					return nil
				}
				return err
			}); err != nil {
				l.fail("mkdir %s: %v", d, err)
				return
			}
		}
		if err := settle("create", func() error {
			err := o.create(x + "/f")
			if errors.Is(err, fs.ErrExist) {
				return nil
			}
			return err
		}); err != nil {
			l.fail("create %s/f: %v", x, err)
			return
		}
		var st *rpc.StatResponse
		if err := settle("stat", func() (err error) { st, err = o.stat(x); return err }); err != nil {
			l.fail("stat %s: %v", x, err)
			return
		}
		rerr := o.rename(x, y)
		if rerr != nil {
			unknown.Add(1)
		}
		o = pick(w, i+1)
		var got *rpc.StatResponse
		if err := settle("stat y", func() (err error) { got, err = o.stat(y); return err }); err != nil {
			l.fail("stat %s after rename (%v): %v", y, rerr, err)
			return
		}
		var xerr error
		if err := settle("stat x", func() (err error) { _, xerr = o.stat(x); return xerr }); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.fail("stat %s after rename (%v): %v", x, rerr, err)
			return
		}
		moved := got.Inode.ID == st.Inode.ID
		switch {
		case rerr == nil && !moved:
			l.fail("rename %s %s acknowledged, but %s is inode %d, not the moved %d", x, y, y, got.Inode.ID, st.Inode.ID)
		case moved && xerr == nil:
			l.fail("rename %s %s (%v): both %s and %s exist", x, y, rerr, x, y)
		case !moved && xerr != nil:
			l.fail("rename %s %s (%v): %s gone but %s is not it: %v", x, y, rerr, x, y, xerr)
		case moved:
			if err := settle("stat y/f", func() error { _, err := o.stat(y + "/f"); return err }); err != nil {
				l.fail("stat %s/f: %v", y, err)
			}
		}
		l.done.Add(1)
	})
	l.wait(10)
	for round := range 1 {
		for _, id := range c.IDs {
			restarting.Store(id)
			for _, s := range c.NS(id).Leads() {
				{
					to := c.IDs[(slices.Index(c.IDs, id)+1)%len(c.IDs)]
					if err := c.HandOver(s, to); err != nil {
						t.Logf("round %d: handing %s to %s: %v", round, s, to, err)
					}
				}
			}
			c.Stop(id)
			l.wait(3)
			c.Start(id)
			restarting.Store("")
			l.wait(3)
		}
	}
	halt()
	t.Logf("%d rounds, %d failed, %d renames answered an error", l.done.Load(), l.failed.Load(), unknown.Load())
}

// TestDirRenameWhileAShardIsUnnamed renames a directory while the
// coordinator's view of the cluster does not name the directory's home
// shard (gossip lost it for a while, as when its hosts restart): the
// rename must not leave the directory's inode behind at its old path and
// the new name pointing at nothing: it re-keys the subtree in that shard
// too (the shard's leader is found through its replicas' hosts), or fails
// as unavailable and succeeds once the shard is named again.
func TestDirRenameWhileAShardIsUnnamed(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	mustOK(t, via(c, "n1").mkdir("/p", false), "mkdir /p")
	parent := homeOf(c, t, "/p")
	var x, home string
	for k := range 50 {
		d := fmt.Sprintf("/p/x%d", k)
		mustOK(t, via(c, "n1").mkdir(d, false), "mkdir %s", d)
		if h := homeOf(c, t, d); h != parent && !slices.Contains(c.NS(parent).Leads(), h) {
			x, home = d, h
			break
		}
	}
	if x == "" {
		t.Fatal("no directory of /p was homed on a shard its parent's leader does not lead")
	}
	mustOK(t, via(c, parent).create(x+"/f"), "create %s/f", x)
	mustOK(t, via(c, parent).mkdir("/p/y", false), "mkdir /p/y")
	st, err := via(c, parent).stat(x)
	mustOK(t, err, "stat %s", x)

	restore := c.Dir.HideShard(home)
	rpctest.Eventually(t, 10*time.Second, "the coordinator forgets shard "+home, func() error {
		if c.NS(parent).NamesShard(home) {
			return fmt.Errorf("%s still names it", parent)
		}
		return nil
	})
	err = via(c, parent).rename(x, "/p/y")
	restore()
	switch {
	case errors.Is(err, rpc.ErrUnavailable):
		// The shard could not be reached: nothing was renamed; once it
		// is named again, the rename succeeds.
		rpctest.Eventually(t, 30*time.Second, "the rename once shard "+home+" is named again", func() error {
			return via(c, parent).rename(x, "/p/y")
		})
	case err != nil:
		t.Fatalf("rename %s /p/y while its home %s is unnamed: %v", x, home, err)
	}
	for _, id := range c.IDs {
		got, err := via(c, id).stat("/p/y")
		if err != nil {
			t.Fatalf("stat /p/y via %s: %v", id, err)
		}
		if got.Inode.ID != st.Inode.ID {
			t.Errorf("stat /p/y via %s: inode %d, want the moved %d", id, got.Inode.ID, st.Inode.ID)
		}
		if _, err := via(c, id).stat("/p/y/f"); err != nil {
			t.Errorf("stat /p/y/f via %s: %v", id, err)
		}
		if _, err := via(c, id).stat(x); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s via %s after the rename: %v, want not exist", x, id, err)
		}
	}
}
