package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

func (o nsOps) link(old, nw string) (*rpc.Inode, error) {
	var r rpc.LinkResponse
	if err := o.call(rpc.MethodLink, &rpc.LinkRequest{Old: old, New: nw}, &r); err != nil {
		return nil, err
	}
	return &r.Inode, nil
}

// TestHardLinks checks link(2) as POSIX has it (docs/design.md, "Hard
// links"), at R=1 and R=3, with names spread over the shards (the
// balanced placement): every name shows one inode (id, link count,
// attributes), a change through one name shows through all, a rename
// onto another name of the same inode does nothing, removing or
// replacing a name takes one from the count, and the record goes with
// the last name.
func TestHardLinks(t *testing.T) { forEachR(t, testHardLinks) }

func testHardLinks(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	o := via(c, c.IDs[0])
	for _, d := range []string{"/h/a", "/h/b"} {
		mustOK(t, o.mkdir(d, true), "mkdir %s", d)
	}
	mustOK(t, o.create("/h/a/f"), "create")
	st, err := o.stat("/h/a/f")
	mustOK(t, err, "stat")
	id := st.Inode.ID
	// same checks that every name in names shows inode id with n links
	// and mode mode, through every node.
	same := func(step string, n uint32, mode uint32, names ...string) {
		t.Helper()
		for _, nid := range c.IDs {
			for _, p := range names {
				st, err := via(c, nid).stat(p)
				if err != nil {
					t.Fatalf("%s: stat %s via %s: %v", step, p, nid, err)
				}
				if in := st.Inode; in.ID != id || in.Nlink != n || in.Mode != mode || in.Path != p || in.Type != rpc.TypeFile {
					t.Fatalf("%s: %s via %s: id %d, %d links, mode %#o, path %s, type %s; want id %d, %d links, mode %#o",
						step, p, nid, in.ID, in.Nlink, in.Mode, in.Path, in.Type, id, n, mode)
				}
			}
		}
	}
	in, err := o.link("/h/a/f", "/h/b/g")
	mustOK(t, err, "link")
	if in.ID != id || in.Nlink != 2 || in.Path != "/h/b/g" {
		t.Fatalf("link answered %+v", in)
	}
	same("first link", 2, 0o644, "/h/a/f", "/h/b/g")
	_, err = via(c, c.IDs[1]).link("/h/b/g", "/h/a/f2")
	mustOK(t, err, "link of a linked name")
	same("second link", 3, 0o644, "/h/a/f", "/h/b/g", "/h/a/f2")

	// A change through one name shows through every name.
	mode := uint32(0o600)
	size := int64(42)
	_, err = via(c, c.IDs[2]).setattr(&rpc.SetAttrRequest{Path: "/h/a/f2", Mode: &mode, Size: &size})
	mustOK(t, err, "chmod")
	same("chmod", 3, 0o600, "/h/a/f", "/h/b/g", "/h/a/f2")
	_, err = o.setattr(&rpc.SetAttrRequest{Path: "/h/b/g", Xattr: &rpc.XattrChange{Name: "user.k", Value: []byte("v")}})
	mustOK(t, err, "setxattr")
	for _, p := range []string{"/h/a/f", "/h/b/g", "/h/a/f2"} {
		st, err := o.stat(p)
		mustOK(t, err, "stat")
		if st.Inode.Size != 42 || len(st.Inode.Xattrs) != 1 || st.Inode.Xattrs[0].Name != "user.k" {
			t.Fatalf("%s: size %d, xattrs %+v; want 42 and user.k", p, st.Inode.Size, st.Inode.Xattrs)
		}
	}

	// What link refuses.
	for _, tc := range []struct {
		old, nw string
		want    error
	}{
		{"/h/a/f", "/h/b/g", fs.ErrExist},
		{"/h/a", "/h/d", fs.ErrPermission},
		{"/h/a/missing", "/h/b/m", fs.ErrNotExist},
		{"/h/a/f", "/h/missing/m", fs.ErrNotExist},
		{"/h/a/f", "/h/a/f/x", rpc.ErrNotDir},
	} {
		if _, err := o.link(tc.old, tc.nw); !errors.Is(err, tc.want) {
			t.Errorf("link %s %s: %v, want %v", tc.old, tc.nw, err, tc.want)
		}
	}

	// A rename onto another name of the same inode does nothing.
	mustOK(t, o.rename("/h/a/f", "/h/b/g"), "rename onto the same inode")
	same("rename onto the same inode", 3, 0o600, "/h/a/f", "/h/b/g", "/h/a/f2")
	// A name moves like a file, and the inode's ctime moves with it.
	before, err := o.stat("/h/a/f")
	mustOK(t, err, "stat")
	mustOK(t, o.rename("/h/a/f2", "/h/b/g2"), "rename of a name")
	same("rename of a name", 3, 0o600, "/h/a/f", "/h/b/g", "/h/b/g2")
	if after, err := o.stat("/h/a/f"); err != nil || after.Inode.Ctime <= before.Inode.Ctime {
		t.Errorf("the ctime of another name after a rename: %d, was %d (%v)", after.Inode.Ctime, before.Inode.Ctime, err)
	}
	// A file renamed over a name replaces that name only.
	mustOK(t, o.create("/h/a/x"), "create")
	mustOK(t, via(c, c.IDs[1]).rename("/h/a/x", "/h/b/g"), "rename over a name")
	same("rename over a name", 2, 0o600, "/h/a/f", "/h/b/g2")
	if st, err := o.stat("/h/b/g"); err != nil || st.Inode.ID == id || st.Inode.Nlink != 1 {
		t.Fatalf("/h/b/g after the rename over it: %+v, %v", st, err)
	}
	// Unlink takes one name; the record goes with the last.
	mustOK(t, via(c, c.IDs[2]).unlink("/h/a/f"), "unlink")
	same("unlink", 1, 0o600, "/h/b/g2")
	if _, err := o.stat("/h/a/f"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of an unlinked name: %v", err)
	}
	mustOK(t, o.unlink("/h/b/g2"), "unlink the last name")
	rec := store.LinkRecordPath(id)
	for _, nid := range c.IDs {
		if _, err := c.NS(nid).Stat(context.Background(), rec); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the record %s after the last name went, via %s: %v", rec, nid, err)
		}
	}
	// A name linked again after the first name went (pjdfstest link/02):
	// the record keeps counting.
	long := "/h/a/" + strings.Repeat("x", 255)
	mustOK(t, o.create(long), "create")
	_, err = o.link(long, "/h/b/n0")
	mustOK(t, err, "link")
	mustOK(t, o.unlink(long), "unlink the first name")
	in, err = via(c, c.IDs[1]).link("/h/b/n0", long)
	mustOK(t, err, "link again")
	if in.Nlink != 2 {
		t.Errorf("link again: %d links, want 2", in.Nlink)
	}
	for _, p := range []string{"/h/b/n0", long} {
		st, err := o.stat(p)
		mustOK(t, err, "stat")
		if st.Inode.Nlink != 2 {
			t.Errorf("%s has %d links after linking again, want 2", p, st.Inode.Nlink)
		}
	}
	mustOK(t, o.unlink("/h/b/n0"), "unlink")
	mustOK(t, o.unlink(long), "unlink")
	// The reserved tree stays closed to clients.
	if _, err := o.link("/h/b/g", "/.ghba/x"); err == nil {
		t.Errorf("a link into /.ghba was allowed")
	}
}

// TestHardLinksConcurrent: links and unlinks of one inode through every
// node at once: the link count is the number of names left.
func TestHardLinksConcurrent(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	o := via(c, c.IDs[0])
	mustOK(t, o.mkdir("/c", false), "mkdir")
	mustOK(t, o.create("/c/f"), "create")
	const perNode = 4
	var wg sync.WaitGroup
	errs := make(chan error, 2*perNode*len(c.IDs))
	for i, nid := range c.IDs {
		for j := range perNode {
			wg.Go(func() {
				p := fmt.Sprintf("/c/l%d-%d", i, j)
				if _, err := via(c, nid).link("/c/f", p); err != nil {
					errs <- fmt.Errorf("link %s: %w", p, err)
					return
				}
				if j%2 == 0 {
					if err := via(c, nid).unlink(p); err != nil {
						errs <- fmt.Errorf("unlink %s: %w", p, err)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	names, err := o.names("/c")
	mustOK(t, err, "readdir")
	want := uint32(len(names))
	if want != 1+uint32(len(c.IDs)*perNode/2) {
		t.Errorf("names left: %v", names)
	}
	for _, n := range names {
		st, err := o.stat("/c/" + n)
		mustOK(t, err, "stat")
		if st.Inode.Nlink != want {
			t.Errorf("/c/%s has %d links, want %d (the names left)", n, st.Inode.Nlink, want)
		}
	}
}

// TestHardLinkCrash: the coordinator of a link across shards, then of the
// unlink of a linked name, dies before or after its commit point (its
// transaction's parts are prepared at the other shards) and restarts:
// every name then shows the link count of the names that exist, through
// every node, and the new name exists exactly when the commit point
// passed.
func TestHardLinkCrash(t *testing.T) {
	for _, point := range []string{namespace.HookPrepared, namespace.HookCommitted} {
		t.Run(point, func(t *testing.T) {
			c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
			o := via(c, c.IDs[0])
			mustOK(t, o.mkdir("/a", false), "mkdir")
			mustOK(t, o.mkdir("/b", false), "mkdir")
			coord := homeOf(c, t, "/b")
			var f string
			for i := range 50 { // a file homed on another shard than the coordinator's
				p := fmt.Sprintf("/a/f%d", i)
				mustOK(t, o.create(p), "create %s", p)
				if homeOf(c, t, p) != coord {
					f = p
					break
				}
			}
			if f == "" {
				t.Fatal("every file of /a is homed with /b")
			}
			committed := point == namespace.HookCommitted
			// check stats every name through every node: names that
			// exist show n links, the others do not exist.
			check := func(step string, n uint32, exist, missing []string) {
				t.Helper()
				for _, nid := range c.IDs {
					for _, p := range exist {
						st, err := via(c, nid).stat(p)
						if err != nil || st.Inode.Nlink != n {
							t.Fatalf("%s: %s via %s: %+v, %v; want %d links", step, p, nid, st, err, n)
						}
					}
					for _, p := range missing {
						if _, err := via(c, nid).stat(p); !errors.Is(err, fs.ErrNotExist) {
							t.Fatalf("%s: %s via %s: %v, want not exist", step, p, nid, err)
						}
					}
				}
			}
			armed := crashHook(c.NS(coord), point, nil)
			armed.Store(true)
			if _, err := via(c, coord).link(f, "/b/g"); !errors.Is(err, rpc.ErrUnavailable) {
				t.Fatalf("crashed link: %v", err)
			}
			c.Restart(coord)
			c.SettleAll()
			if committed {
				check("link after the restart", 2, []string{f, "/b/g"}, nil)
			} else {
				check("link after the restart", 1, []string{f}, []string{"/b/g"})
				_, err := via(c, coord).link(f, "/b/g")
				mustOK(t, err, "link again")
				check("link again", 2, []string{f, "/b/g"}, nil)
			}
			armed = crashHook(c.NS(coord), point, nil)
			armed.Store(true)
			if err := via(c, coord).unlink("/b/g"); !errors.Is(err, rpc.ErrUnavailable) {
				t.Fatalf("crashed unlink: %v", err)
			}
			c.Restart(coord)
			c.SettleAll()
			if committed {
				check("unlink after the restart", 1, []string{f}, []string{"/b/g"})
			} else {
				check("unlink after the restart", 2, []string{f, "/b/g"}, nil)
			}
		})
	}
}
