package mount

import (
	"bytes"
	"context"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Extended attributes (docs/design.md, "Extended attributes"). They are
// part of the inode: a get or a list reads the inode as the mount's client
// holds it (its metadata cache, under a lease, so as fresh as a stat), and
// a set or a remove is one SetAttr. The kernel checks who may read or
// change which namespace before it asks (fs/xattr.c); the mount hides
// "trusted." attributes from callers other than root, as Linux does.

var (
	_ gofs.NodeGetxattrer    = (*node)(nil)
	_ gofs.NodeListxattrer   = (*node)(nil)
	_ gofs.NodeSetxattrer    = (*node)(nil)
	_ gofs.NodeRemovexattrer = (*node)(nil)
)

// securityCapability is the attribute the kernel reads before every
// write: go-fuse answers it (MountOptions.IgnoreSecurityLabels), so the
// mount does not let it be set.
const securityCapability = "security.capability"

// xattrs returns n's extended attributes.
func (n *node) xattrs(ctx context.Context, op string) ([]rpc.Xattr, syscall.Errno) {
	if n.gone.Load() {
		if l := n.last.Load(); l != nil {
			return l.Xattrs, 0
		}
		return nil, 0
	}
	f, p := n.fs, n.path()
	st, err := f.stat(ctx, p)
	if err != nil {
		return nil, f.errno(op, p, err)
	}
	n.remember(&st.Inode)
	return st.Inode.Xattrs, 0
}

// hidden reports whether the caller may not see attribute name: a
// "trusted." one for a caller other than root.
func hidden(ctx context.Context, name string) bool {
	if !strings.HasPrefix(name, "trusted.") {
		return false
	}
	c, ok := fuse.FromContext(ctx)
	return ok && c.Uid != 0
}

// checkXattrName answers for a name the kernel passes on unchecked (a
// FUSE file system gets every name) as Linux's own file systems do: one in
// no namespace the mount keeps is not supported, a namespace alone is
// invalid.
func checkXattrName(name string) syscall.Errno {
	switch ns := store.XattrNamespace(name); {
	case ns == "":
		return syscall.EOPNOTSUPP
	case len(name) == len(ns):
		return syscall.EINVAL
	}
	return 0
}

// Getxattr reads attribute attr into dest: its size and ERANGE when dest
// is too small (go-fuse turns that into the size for a size query).
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ctx = detach(ctx)
	if e := checkXattrName(attr); e != 0 {
		return 0, e
	}
	if hidden(ctx, attr) {
		return 0, syscall.ENODATA
	}
	xs, e := n.xattrs(ctx, "getxattr")
	if e != 0 {
		return 0, e
	}
	for _, x := range xs {
		if x.Name != attr {
			continue
		}
		if len(dest) < len(x.Value) {
			return uint32(len(x.Value)), syscall.ERANGE
		}
		return uint32(copy(dest, x.Value)), 0
	}
	return 0, syscall.ENODATA
}

// Listxattr writes the names of n's attributes, each ended by a NUL, into
// dest: their size and ERANGE when dest is too small.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx = detach(ctx)
	xs, e := n.xattrs(ctx, "listxattr")
	if e != 0 {
		return 0, e
	}
	var list []byte
	for _, x := range xs {
		if !hidden(ctx, x.Name) {
			list = append(append(list, x.Name...), 0)
		}
	}
	if len(dest) < len(list) {
		return uint32(len(list)), syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

// Setxattr sets attribute attr to data; flags XATTR_CREATE and
// XATTR_REPLACE as setxattr(2).
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if attr == securityCapability {
		return syscall.EOPNOTSUPP
	}
	ch := rpc.XattrChange{Name: attr, Value: bytes.Clone(data),
		Create: flags&unix.XATTR_CREATE != 0, Replace: flags&unix.XATTR_REPLACE != 0}
	if flags&^uint32(unix.XATTR_CREATE|unix.XATTR_REPLACE) != 0 {
		return syscall.EINVAL
	}
	return n.changeXattr(detach(ctx), "setxattr", &ch)
}

// Removexattr removes attribute attr.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.changeXattr(detach(ctx), "removexattr", &rpc.XattrChange{Name: attr, Remove: true})
}

// changeXattr applies ch to n: in the cluster, or to what this mount
// knows of a removed inode that is still open.
func (n *node) changeXattr(ctx context.Context, op string, ch *rpc.XattrChange) syscall.Errno {
	if e := checkXattrName(ch.Name); e != 0 {
		return e
	}
	if hidden(ctx, ch.Name) {
		return syscall.EPERM
	}
	f := n.fs
	if n.gone.Load() {
		return n.changeGoneXattr(ch)
	}
	p := n.path()
	f.own.note(p)
	err := f.change(ctx, func(ctx context.Context) error {
		_, err := f.c.SetAttr(ctx, &rpc.SetAttrRequest{Path: p, Xattr: ch})
		return err
	}, func(ctx context.Context) bool {
		// A lost answer: applied if the attribute is now as asked.
		st, err := f.c.Stat(ctx, p)
		if err != nil {
			return false
		}
		for _, x := range st.Inode.Xattrs {
			if x.Name == ch.Name {
				return !ch.Remove && bytes.Equal(x.Value, ch.Value)
			}
		}
		return ch.Remove
	})
	if err != nil {
		return f.errno(op, p, err)
	}
	return 0
}

// changeGoneXattr applies ch to a removed inode's last known state.
func (n *node) changeGoneXattr(ch *rpc.XattrChange) syscall.Errno {
	l := rpc.Inode{Type: rpc.TypeFile}
	if p := n.last.Load(); p != nil {
		l = *p
	}
	var xs []rpc.Xattr
	found := false
	for _, x := range l.Xattrs {
		if x.Name == ch.Name {
			found = true
			if !ch.Remove {
				xs = append(xs, rpc.Xattr{Name: x.Name, Value: ch.Value})
			}
			continue
		}
		xs = append(xs, x)
	}
	switch {
	case !found && (ch.Remove || ch.Replace):
		return syscall.ENODATA
	case found && ch.Create:
		return syscall.EEXIST
	case !found:
		xs = append(xs, rpc.Xattr{Name: ch.Name, Value: ch.Value})
	}
	l.Xattrs = xs
	n.remember(&l)
	return 0
}
