package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// TestSetgidDirectory checks Linux's setgid rule for directories, applied
// by the parent's home: below a directory with the setgid bit, a new
// inode takes the directory's group and a new directory the bit too,
// whichever shard the child is placed on (the balanced placement puts
// children on other shards than their parent); a create or mkdir with
// AsGiven, and every entry of a BatchCreate (an import), keeps what it
// asks for.
func TestSetgidDirectory(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	o := via(c, c.IDs[0])
	mustOK(t, o.mkdir("/g", false), "mkdir /g")
	if _, err := o.setattr(&rpc.SetAttrRequest{Path: "/g", Mode: u32(0o2775), GID: u32(50)}); err != nil {
		t.Fatal(err)
	}
	mustOK(t, o.mkdir("/plain", false), "mkdir /plain")
	create := func(r *rpc.CreateRequest) {
		t.Helper()
		mustOK(t, o.call(rpc.MethodCreate, r, &rpc.CreateResponse{}), "create %s", r.Path)
	}
	mkdir := func(r *rpc.MkdirRequest) {
		t.Helper()
		mustOK(t, o.call(rpc.MethodMkdir, r, &rpc.MkdirResponse{}), "mkdir %s", r.Path)
	}
	// Several files and directories, so that some land on other shards.
	files := []string{"/g/f1", "/g/f2", "/g/f3", "/g/f4"}
	for _, p := range files {
		create(&rpc.CreateRequest{Path: p, Mode: 0o644, UID: 1, GID: 7})
	}
	dirs := []string{"/g/d1", "/g/d2", "/g/d3", "/g/d4"}
	for _, p := range dirs {
		mkdir(&rpc.MkdirRequest{Path: p, Mode: 0o755, UID: 1, GID: 7})
	}
	mkdir(&rpc.MkdirRequest{Path: "/g/p/q", Mode: 0o755, UID: 1, GID: 7, Parents: true})
	create(&rpc.CreateRequest{Path: "/g/d1/deeper", Mode: 0o644, UID: 1, GID: 7})
	create(&rpc.CreateRequest{Path: "/g/setgid-file", Mode: 0o2755, UID: 1, GID: 7})
	create(&rpc.CreateRequest{Path: "/g/imported", Mode: 0o644, UID: 1, GID: 7, AsGiven: true})
	mkdir(&rpc.MkdirRequest{Path: "/g/imported-dir", Mode: 0o755, UID: 1, GID: 7, AsGiven: true})
	create(&rpc.CreateRequest{Path: "/plain/f", Mode: 0o644, UID: 1, GID: 7})
	mkdir(&rpc.MkdirRequest{Path: "/plain/d", Mode: 0o755, UID: 1, GID: 7})
	var br rpc.BatchCreateResponse
	mustOK(t, o.call(rpc.MethodBatchCreate, &rpc.BatchCreateRequest{Dir: "/g", Entries: []rpc.BatchCreateEntry{
		{Name: "batch-file", Type: rpc.TypeFile, Mode: 0o644, UID: 1, GID: 7},
		{Name: "batch-dir", Type: rpc.TypeDir, Mode: 0o755, UID: 1, GID: 7},
	}}, &br), "batch create")
	for _, r := range br.Results {
		if err := r.Err(); err != nil {
			t.Fatalf("batch create: %v", err)
		}
	}

	want := map[string]struct{ mode, gid uint32 }{
		"/g/p": {0o2755, 50}, "/g/p/q": {0o2755, 50}, "/g/d1/deeper": {0o644, 50},
		"/g/setgid-file": {0o2755, 50}, // no ACLs: the caller is trusted, as with CAP_FSETID
		"/g/imported":    {0o644, 7}, "/g/imported-dir": {0o755, 7},
		"/g/batch-file": {0o644, 7}, "/g/batch-dir": {0o755, 7},
		"/plain/f": {0o644, 7}, "/plain/d": {0o755, 7},
	}
	for _, p := range files {
		want[p] = struct{ mode, gid uint32 }{0o644, 50}
	}
	for _, p := range dirs {
		want[p] = struct{ mode, gid uint32 }{0o2755, 50}
	}
	homes := map[string]bool{}
	for p, w := range want {
		st, err := o.stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		homes[st.Inode.Home] = true
		if st.Inode.Mode != w.mode || st.Inode.GID != w.gid || st.Inode.UID != 1 {
			t.Errorf("%s: mode %#o uid %d gid %d, want mode %#o uid 1 gid %d", p, st.Inode.Mode, st.Inode.UID, st.Inode.GID, w.mode, w.gid)
		}
	}
	if len(homes) < 2 {
		t.Errorf("every child homed on %v: the test did not cover a child placed on another shard", homes)
	}
}

// TestChownClearsSetuid checks Linux's rule for a chown (ATTR_KILL_SUID,
// ATTR_KILL_SGID): a file that is not a directory loses its setuid bit,
// and its setgid bit when it is group executable; a directory keeps both;
// a chown that sets the mode too keeps the mode it sets.
func TestChownClearsSetuid(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 1})
	o := via(c, c.IDs[0])
	cases := []struct {
		name string
		mode uint32
		dir  bool
		req  rpc.SetAttrRequest
		want uint32
	}{
		{"setuid and setgid executable", 0o6755, false, rpc.SetAttrRequest{UID: u32(5)}, 0o0755},
		{"setgid without group execute stays", 0o6744, false, rpc.SetAttrRequest{GID: u32(5)}, 0o2744},
		{"a directory keeps its bits", 0o6755, true, rpc.SetAttrRequest{UID: u32(5), GID: u32(5)}, 0o6755},
		{"a mode set with the chown is kept", 0o6755, false, rpc.SetAttrRequest{UID: u32(5), Mode: u32(0o4711)}, 0o4711},
		{"a chmod alone keeps them", 0o0755, false, rpc.SetAttrRequest{Mode: u32(0o6755)}, 0o6755},
	}
	for i, tc := range cases {
		p := fmt.Sprintf("/f%d", i)
		if tc.dir {
			mustOK(t, o.call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: p, Mode: tc.mode}, &rpc.MkdirResponse{}), "mkdir %s", p)
		} else {
			mustOK(t, o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: p, Mode: tc.mode}, &rpc.CreateResponse{}), "create %s", p)
		}
		tc.req.Path = p
		if _, err := o.setattr(&tc.req); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		st, err := o.stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Inode.Mode != tc.want {
			t.Errorf("%s: mode %#o, want %#o", tc.name, st.Inode.Mode, tc.want)
		}
	}
}

// TestAccessedKeepsCtime: a SetAttr that records a read (Accessed, as a
// mount's relatime does) sets the atime and keeps the ctime, where an
// explicit atime change (touch -a) moves the ctime; Accessed with any
// other change is refused.
func TestAccessedKeepsCtime(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 1})
	o := via(c, c.IDs[0])
	mustOK(t, o.create("/f"), "create /f")
	before, err := o.stat("/f")
	if err != nil {
		t.Fatal(err)
	}
	at := before.Inode.Ctime + 1_000_000_000
	if _, err := o.setattr(&rpc.SetAttrRequest{Path: "/f", Atime: &at, Accessed: true}); err != nil {
		t.Fatal(err)
	}
	st, err := o.stat("/f")
	if err != nil {
		t.Fatal(err)
	}
	if st.Inode.Atime != at || st.Inode.Ctime != before.Inode.Ctime {
		t.Errorf("accessed: atime %d ctime %d, want atime %d and ctime %d kept", st.Inode.Atime, st.Inode.Ctime, at, before.Inode.Ctime)
	}
	at++
	if _, err := o.setattr(&rpc.SetAttrRequest{Path: "/f", Atime: &at}); err != nil {
		t.Fatal(err)
	}
	if st, err = o.stat("/f"); err != nil {
		t.Fatal(err)
	}
	if st.Inode.Atime != at || st.Inode.Ctime == before.Inode.Ctime {
		t.Errorf("touch -a: atime %d ctime %d, want atime %d and a new ctime", st.Inode.Atime, st.Inode.Ctime, at)
	}
	for name, r := range map[string]*rpc.SetAttrRequest{
		"no atime":   {Path: "/f", Accessed: true},
		"with mtime": {Path: "/f", Atime: &at, Mtime: &at, Accessed: true},
		"with mode":  {Path: "/f", Atime: &at, Mode: u32(0o600), Accessed: true},
	} {
		if _, err := o.setattr(r); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("accessed %s: %v, want fs.ErrInvalid", name, err)
		}
	}
}
