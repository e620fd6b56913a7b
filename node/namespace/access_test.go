package namespace

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

func TestCheckSetAttrBy(t *testing.T) {
	alice := &acl.Identity{User: "alice", UID: 1000, GID: 1000, Groups: []uint32{50}}
	bob := &acl.Identity{User: "bob", UID: 1001, GID: 1001}
	root := &acl.Identity{User: "root"}
	u := func(v uint32) *uint32 { return &v }
	size := int64(7)
	file := store.Inode{Type: store.TypeFile, Mode: 0o664, UID: 1000, GID: 1000}
	x := func(name string) *rpc.XattrChange { return &rpc.XattrChange{Name: name, Value: []byte("v")} }
	tests := []struct {
		name string
		id   *acl.Identity
		req  rpc.SetAttrRequest
		ok   bool
		ino  *store.Inode // nil: file
	}{
		{"owner chmod", alice, rpc.SetAttrRequest{Mode: u(0o600)}, true, nil},
		{"other chmod", bob, rpc.SetAttrRequest{Mode: u(0o777)}, false, nil},
		{"root chmod", root, rpc.SetAttrRequest{Mode: u(0o777)}, true, nil},
		{"owner chown to another user", alice, rpc.SetAttrRequest{UID: u(1001)}, false, nil},
		{"owner chown to itself", alice, rpc.SetAttrRequest{UID: u(1000)}, true, nil},
		{"root chown", root, rpc.SetAttrRequest{UID: u(1001), GID: u(1001)}, true, nil},
		{"owner chgrp to its group", alice, rpc.SetAttrRequest{GID: u(50)}, true, nil},
		{"owner chgrp to a foreign group", alice, rpc.SetAttrRequest{GID: u(1001)}, false, nil},
		{"other truncates without write", bob, rpc.SetAttrRequest{Size: &size}, false, nil},
		{"no identity: not checked", nil, rpc.SetAttrRequest{UID: u(5)}, true, nil},
		{"owner sets a user xattr", alice, rpc.SetAttrRequest{Xattr: x("user.a")}, true, nil},
		{"group member with write sets a user xattr", &acl.Identity{UID: 7, GID: 1000}, rpc.SetAttrRequest{Xattr: x("user.a")}, true, nil},
		{"other without write sets a user xattr", bob, rpc.SetAttrRequest{Xattr: x("user.a")}, false, nil},
		{"owner without write sets a user xattr", alice, rpc.SetAttrRequest{Xattr: x("user.a")}, false, &store.Inode{Type: store.TypeFile, Mode: 0o444, UID: 1000}},
		{"owner sets a trusted xattr", alice, rpc.SetAttrRequest{Xattr: x("trusted.a")}, false, nil},
		{"owner sets a security xattr", alice, rpc.SetAttrRequest{Xattr: x("security.a")}, false, nil},
		{"root sets a trusted xattr", root, rpc.SetAttrRequest{Xattr: x("trusted.a")}, true, nil},
		{"user xattr of a symlink", alice, rpc.SetAttrRequest{Xattr: x("user.a")}, false, &store.Inode{Type: store.TypeSymlink, Mode: 0o777, UID: 1000, Target: "t"}},
		{"user xattr of another's sticky directory", bob, rpc.SetAttrRequest{Xattr: x("user.a")}, false, &store.Inode{Type: store.TypeDir, Mode: 0o1777, UID: 1000}},
		{"user xattr of one's sticky directory", alice, rpc.SetAttrRequest{Xattr: x("user.a")}, true, &store.Inode{Type: store.TypeDir, Mode: 0o1777, UID: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ino := file
			if tt.ino != nil {
				ino = *tt.ino
			}
			err := checkSetAttrBy(tt.id, "/f", &ino, &tt.req)
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && !errors.Is(err, fs.ErrPermission) {
				t.Fatalf("err %v, want fs.ErrPermission", err)
			}
		})
	}
}

func TestCheckAccessBy(t *testing.T) {
	owner := &acl.Identity{UID: 1000, GID: 1000}
	other := &acl.Identity{UID: 1001, GID: 1001}
	for _, tt := range []struct {
		name string
		id   *acl.Identity
		mode uint32
		ok   bool
	}{
		{"a reader who may not write", other, 0o644, true},
		{"another who may not read", other, 0o640, false},
		{"the owner", owner, 0o600, true},
		{"the owner without read", owner, 0o200, false},
		{"root", &acl.Identity{}, 0, true},
		{"no identity", nil, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ino := store.Inode{Type: store.TypeFile, Mode: tt.mode, UID: 1000, GID: 1000}
			err := checkAccessBy(tt.id, "/f", &ino)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, fs.ErrPermission)) {
				t.Fatalf("checkAccessBy = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestGuardAndStamp(t *testing.T) {
	alice := acl.WithIdentity(context.Background(), &acl.Identity{UID: 1000, GID: 100})
	node := acl.WithIdentity(context.Background(), &acl.Identity{Server: true})
	if err := guard(alice, "/a", "//.ghba/acl"); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("guard of the reserved tree: %v", err)
	}
	if err := guard(alice, "/a/.ghba"); err != nil {
		t.Errorf("guard of an ordinary path: %v", err)
	}
	if err := guard(node, "/.ghba/acl"); err != nil {
		t.Errorf("a node is not guarded: %v", err)
	}
	uid, gid := uint32(0), uint32(0)
	stampOwner(alice, &uid, &gid)
	if uid != 1000 || gid != 100 {
		t.Errorf("stamped %d:%d, want 1000:100", uid, gid)
	}
	r := &rpc.ReadDirResponse{Entries: []rpc.DirEntry{{Name: ".ghba"}, {Name: "a"}}}
	hideReserved(alice, "/", r)
	if len(r.Entries) != 1 || r.Entries[0].Name != "a" {
		t.Errorf("listing of / %+v", r.Entries)
	}
}

func TestAllowDir(t *testing.T) {
	alice := &acl.Identity{User: "alice", UID: 1000, GID: 1000}
	bob := &acl.Identity{User: "bob", UID: 1001, GID: 1001}
	private := store.Inode{Type: store.TypeDir, Mode: 0o700, UID: 1000, GID: 1000}
	shared := store.Inode{Type: store.TypeDir, Mode: 0o775, UID: 1000, GID: 1001}
	for _, tt := range []struct {
		name string
		id   *acl.Identity
		ino  store.Inode
		want uint32
		ok   bool
	}{
		{"owner writes its 0700 dir", alice, private, acl.Write | acl.Execute, true},
		{"other cannot write a 0700 dir", bob, private, acl.Write | acl.Execute, false},
		{"other cannot list a 0700 dir", bob, private, acl.Read, false},
		{"group member writes a 0775 dir", bob, shared, acl.Write | acl.Execute, true},
		{"root", &acl.Identity{}, private, acl.Read | acl.Write | acl.Execute, true},
		{"no identity", nil, private, acl.Write, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := allowDir(tt.id, "/d", &tt.ino, tt.want)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, fs.ErrPermission)) {
				t.Fatalf("allowDir = %v, want ok %v", err, tt.ok)
			}
		})
	}
	if got := permNames(acl.Write | acl.Execute); got != "write and search" {
		t.Errorf("permNames = %q", got)
	}
}

func TestStickyOwner(t *testing.T) {
	alice := &acl.Identity{UID: 1000}
	sticky := store.Inode{Type: store.TypeDir, Mode: 0o1777}
	plain := store.Inode{Type: store.TypeDir, Mode: 0o777}
	own := store.Inode{Type: store.TypeDir, Mode: 0o1777, UID: 1000}
	if o := stickyOwner(alice, &sticky); o == nil || *o != 1000 {
		t.Errorf("sticky dir of root: %v, want alice's uid", o)
	}
	for name, o := range map[string]*uint32{
		"plain dir": stickyOwner(alice, &plain), "alice's sticky dir": stickyOwner(alice, &own),
		"root": stickyOwner(&acl.Identity{}, &sticky), "no identity": stickyOwner(nil, &sticky),
	} {
		if o != nil {
			t.Errorf("%s: owner %d required, want none", name, *o)
		}
	}
	bobs := store.Inode{UID: 1001}
	if err := checkOwner("/tmp/f", &bobs, stickyOwner(alice, &sticky)); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("alice removing bob's file from /tmp: %v", err)
	}
	if err := checkOwner("/tmp/f", &bobs, nil); err != nil {
		t.Errorf("no owner required: %v", err)
	}
}
