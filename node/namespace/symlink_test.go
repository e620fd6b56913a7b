package namespace_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// TestSymlinksAndImportedAttributes creates symbolic links and files and
// directories with given sizes and times (what an import does) through
// every node, then checks them through every node, across a rename, and
// the requests that must fail.
func TestSymlinksAndImportedAttributes(t *testing.T) { forEachR(t, testSymlinks) }

func testSymlinks(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	const mtime, atime = int64(1_600_000_000_123_456_789), int64(1_700_000_000_000_000_001)
	var mk rpc.MkdirResponse
	mustOK(t, via(c, "n1").call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: "/src/lib", Mode: 0o750, Parents: true, Mtime: mtime, Atime: atime}, &mk), "mkdir -p")
	for i, id := range c.IDs {
		o := via(c, id)
		name := string(rune('a' + i))
		mustOK(t, o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: "/src/lib/" + name + ".so", Mode: 0o755, UID: 7, GID: 8, Size: 123456, Mtime: mtime, Atime: atime}, &rpc.CreateResponse{}), "create")
		mustOK(t, o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: "/src/lib/" + name + ".link", UID: 7, GID: 8, Symlink: name + ".so", Mtime: mtime}, &rpc.CreateResponse{}), "symlink")
	}
	for _, id := range c.IDs {
		o := via(c, id)
		for i := range c.IDs {
			name := string(rune('a' + i))
			st, err := o.stat("/src/lib/" + name + ".so")
			mustOK(t, err, "stat")
			if st.Type != rpc.TypeFile || st.Size != 123456 || st.Mtime != mtime || st.Atime != atime || st.UID != 7 || st.Mode != 0o755 || st.Target != "" {
				t.Errorf("via %s: file %+v", id, st.Inode)
			}
			st, err = o.stat("/src/lib/" + name + ".link")
			mustOK(t, err, "stat link")
			if st.Type != rpc.TypeSymlink || st.Target != name+".so" || st.Size != int64(len(name+".so")) || st.Mtime != mtime {
				t.Errorf("via %s: symlink %+v", id, st.Inode)
			}
		}
		st, err := o.stat("/src/lib")
		mustOK(t, err, "stat dir")
		if st.Mtime != mtime || st.Atime != atime || st.Mode != 0o750 {
			t.Errorf("via %s: directory %+v", id, st.Inode)
		}
		if st, err := o.stat("/src"); err != nil || st.Mtime == mtime {
			t.Errorf("via %s: a parent made by mkdir -p took the requested mtime: %+v %v", id, st, err)
		}
	}
	names, err := via(c, "n2").names("/src/lib")
	mustOK(t, err, "readdir")
	if len(names) != 6 {
		t.Errorf("readdir: %v", names)
	}

	o := via(c, "n3")
	mustOK(t, o.rename("/src/lib/a.link", "/src/b.link"), "rename a symlink")
	if st, err := o.stat("/src/b.link"); err != nil || st.Type != rpc.TypeSymlink || st.Target != "a.so" {
		t.Errorf("renamed symlink: %+v %v", st, err)
	}
	// A symlink is not a directory: nothing is created below it, rmdir
	// refuses it, unlink removes it.
	if err := o.create("/src/b.link/x"); !errors.Is(err, rpc.ErrNotDir) {
		t.Errorf("create below a symlink: %v", err)
	}
	if err := o.rename("/src/lib", "/src/b.link"); !errors.Is(err, rpc.ErrNotDir) {
		t.Errorf("rename a directory over a symlink: %v", err)
	}
	if _, err := o.setattr(&rpc.SetAttrRequest{Path: "/src/b.link", Size: i64(1)}); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("truncate a symlink: %v", err)
	}
	mustOK(t, o.unlink("/src/b.link"), "unlink a symlink")
	for _, bad := range []*rpc.CreateRequest{
		{Path: "/src/neg", Size: -1},
		{Path: "/src/long", Symlink: string(make([]byte, 4097))},
	} {
		if err := o.call(rpc.MethodCreate, bad, &rpc.CreateResponse{}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("create %s: %v, want invalid", bad.Path, err)
		}
	}
}
