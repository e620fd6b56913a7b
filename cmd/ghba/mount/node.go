package mount

import (
	"cmp"
	"context"
	"errors"
	"hash/fnv"
	"io/fs"
	"path"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/rpc"
)

// rootIno is the inode number of the mount's root ("/"), FUSE's root id.
const rootIno = 1

// node is one inode of the mount: a directory, a file or a symbolic link.
// Its path is its place in go-fuse's tree of known inodes.
type node struct {
	gofs.Inode
	fs *FS
	// last is the inode as this mount last read or wrote it; gone is set
	// once this mount removed it (unlink, rmdir, a rename over it). A
	// removed inode that is still open (a file descriptor, a working
	// directory) keeps answering from last, with no link, as POSIX keeps
	// it.
	last atomic.Pointer[rpc.Inode]
	gone atomic.Bool
}

// remember records in as n's last known state.
func (n *node) remember(in *rpc.Inode) {
	c := *in
	n.last.Store(&c)
}

// knownID returns the id of the inode n stands for, as this mount last
// read it (0 when unknown): the condition (IfID) of a change by path, which
// may name another inode by now.
func (n *node) knownID() uint64 {
	if l := n.last.Load(); l != nil {
		return l.ID
	}
	return 0
}

// goneAttr fills out for a removed inode: its last known state, with no
// link, and an open file's changes on top.
func (n *node) goneAttr(out *fuse.Attr) {
	in := rpc.Inode{Path: "/", Type: rpc.TypeFile}
	if l := n.last.Load(); l != nil {
		in = *l
	}
	fillAttr(&in, out)
	out.Ino = n.StableAttr().Ino
	out.Nlink = 0
	if of := n.fs.openOf(out.Ino); of != nil {
		of.localAttr(out)
	}
}

var (
	_ gofs.NodeLookuper    = (*node)(nil)
	_ gofs.NodeGetattrer   = (*node)(nil)
	_ gofs.NodeSetattrer   = (*node)(nil)
	_ gofs.NodeMkdirer     = (*node)(nil)
	_ gofs.NodeCreater     = (*node)(nil)
	_ gofs.NodeUnlinker    = (*node)(nil)
	_ gofs.NodeRmdirer     = (*node)(nil)
	_ gofs.NodeRenamer     = (*node)(nil)
	_ gofs.NodeSymlinker   = (*node)(nil)
	_ gofs.NodeLinker      = (*node)(nil)
	_ gofs.NodeOnForgetter = (*node)(nil)
	_ gofs.NodeMknoder     = (*node)(nil)
	_ gofs.NodeReadlinker  = (*node)(nil)
	_ gofs.NodeReaddirer   = (*node)(nil)
	_ gofs.NodeOpener      = (*node)(nil)
	_ gofs.NodeStatfser    = (*node)(nil)
	_ gofs.NodeFsyncer     = (*node)(nil)
)

// path returns the node's absolute path in the cluster.
func (n *node) path() string {
	return "/" + n.Path(n.fs.root.EmbeddedInode())
}

// child returns the absolute path of name in directory n.
func (n *node) child(name string) string {
	return path.Join(n.path(), name)
}

// checkedChild returns the path of child name of n, or ENAMETOOLONG for
// a name or a full path past the cluster's limits (checkName, checkPath).
func (n *node) checkedChild(name string) (string, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return "", e
	}
	p := n.child(name)
	return p, checkPath(p)
}

// inoOf returns the mount's inode number of in: its cluster-wide id. An
// inode that has none yet (made before ids existed, until its shard's
// leader gives it one) gets a number derived from its path, with the top
// bit set so it never meets an id.
func inoOf(in *rpc.Inode) uint64 {
	switch {
	case in.Path == "/":
		return rootIno
	case in.ID != 0:
		return in.ID
	}
	h := fnv.New64a()
	h.Write([]byte(in.Path))
	return h.Sum64() | 1<<63
}

// fileTypes pairs the cluster's inode types with their S_IFMT bits.
var fileTypes = [...]struct {
	typ  string
	bits uint32
}{
	{rpc.TypeFile, syscall.S_IFREG}, {rpc.TypeDir, syscall.S_IFDIR}, {rpc.TypeSymlink, syscall.S_IFLNK},
	{rpc.TypeFIFO, syscall.S_IFIFO}, {rpc.TypeSocket, syscall.S_IFSOCK},
	{rpc.TypeCharDev, syscall.S_IFCHR}, {rpc.TypeBlockDev, syscall.S_IFBLK},
}

// typeBits returns the S_IFMT bits of a cluster inode type (a regular
// file's for an unknown one).
func typeBits(t string) uint32 {
	for _, ft := range fileTypes {
		if ft.typ == t {
			return ft.bits
		}
	}
	return syscall.S_IFREG
}

// typeOfBits returns the cluster inode type of S_IFMT bits ("" for none).
func typeOfBits(mode uint32) string {
	for _, ft := range fileTypes {
		if ft.bits == mode&syscall.S_IFMT {
			return ft.typ
		}
	}
	return ""
}

// fillAttr sets out from a cluster inode.
func fillAttr(in *rpc.Inode, out *fuse.Attr) {
	out.Ino = inoOf(in)
	out.Mode = typeBits(in.Type) | in.Mode&0o7777
	out.Size = uint64(max(in.Size, 0))
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = blockIOSize
	out.Nlink = max(in.Nlink, 1)
	out.Rdev = uint32(in.Rdev)
	out.Owner = fuse.Owner{Uid: in.UID, Gid: in.GID}
	setTime := func(ns int64, sec *uint64, nsec *uint32) {
		*sec, *nsec = uint64(ns/1e9), uint32(ns%1e9)
	}
	setTime(in.Atime, &out.Atime, &out.Atimensec)
	setTime(in.Mtime, &out.Mtime, &out.Mtimensec)
	setTime(in.Ctime, &out.Ctime, &out.Ctimensec)
}

// blockIOSize is the st_blksize the mount reports: programs such as cp
// size their reads and writes by it, and FUSE carries up to 1 MiB a
// request (MaxWrite).
const blockIOSize = 1 << 20

// errno logs and converts err (errno.go) for operation op on p.
func (f *FS) errno(op, p string, err error) syscall.Errno {
	return toErrno(f.log, op, p, err)
}

// stat returns p's inode (from the client's metadata cache under a lease,
// which is as fresh as a linearizable read), retrying while the cluster
// is unavailable.
func (f *FS) stat(ctx context.Context, p string) (*rpc.StatResponse, error) {
	var st *rpc.StatResponse
	err := f.retry(ctx, func(ctx context.Context) error {
		var err error
		st, err = f.c.Stat(ctx, p)
		return err
	})
	return st, err
}

// fillAttr sets out from a cluster inode and, for a file this mount has
// open with changes not committed yet, from those (every reply that carries
// attributes must: the kernel takes the size of any of them).
func (f *FS) fillAttr(in *rpc.Inode, out *fuse.Attr) {
	fillAttr(in, out)
	if of := f.openOf(out.Ino); of != nil {
		of.localAttr(out)
	}
}

// cacheFor returns how long the kernel may keep p's name and attributes:
// the flags' timeouts, cut to what is left of the lease under which this
// mount's client holds p. While the lease lasts, a change by another
// client revokes it first and the mount tells the kernel at once
// (notify.go); after it, nothing would, so the kernel must ask again.
func (f *FS) cacheFor(p string) (entry, attr time.Duration) {
	entry, attr = f.opts.EntryTimeout, f.opts.AttrTimeout
	if until := f.c.CachedUntil(p); !until.IsZero() {
		left := max(time.Until(until), time.Millisecond)
		entry, attr = min(entry, left), min(attr, left)
	}
	return entry, attr
}

// newChild returns the inode of in, a child of n, and fills out.
func (f *FS) newChild(ctx context.Context, n *node, in *rpc.Inode, out *fuse.EntryOut) *gofs.Inode {
	f.fillAttr(in, &out.Attr)
	entry, attr := f.cacheFor(in.Path)
	out.SetEntryTimeout(entry)
	out.SetAttrTimeout(attr)
	out.NodeId = 0
	ino := inoOf(in)
	nd := &node{fs: f}
	ch := n.NewInode(ctx, nd, gofs.StableAttr{Mode: typeBits(in.Type), Ino: ino})
	nd.remember(in)
	if k, _ := f.kept.LoadOrStore(ino, nd); k != nd {
		// Another name of an inode this mount knows (go-fuse answers
		// with the kept node): it exists, with this state.
		kn := k.(*node)
		kn.remember(in)
		kn.gone.Store(false)
	}
	return ch
}

// OnForget drops n from the nodes kept by inode number once the kernel
// forgot it (go-fuse's NodeOnForgetter).
func (n *node) OnForget() {
	n.fs.kept.CompareAndDelete(n.StableAttr().Ino, n)
}

// caller returns the uid and gid new inodes get: the calling process's
// with ActAsCaller, else 0 (the cluster takes the token's user).
func (f *FS) caller(ctx context.Context) (uid, gid uint32) {
	if !f.opts.ActAsCaller {
		return 0, 0
	}
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// owner returns the uid, gid and mode bits of a new entry: the caller's
// uid and gid (caller) and the permission bits of mode. Below a directory
// with the setgid bit the cluster gives the entry the directory's group
// (and a new directory the bit), as Linux's own file systems do.
func (f *FS) owner(ctx context.Context, mode uint32) (uid, gid, outMode uint32) {
	uid, gid = f.caller(ctx)
	return uid, gid, mode & 0o7777
}

// Lookup finds name in directory n.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	p, e := n.checkedChild(name)
	if e != 0 {
		return nil, e
	}
	f := n.fs
	st, err := f.stat(ctx, p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, syscall.ENOENT
		}
		return nil, f.errno("lookup", p, err)
	}
	return f.newChild(ctx, n, &st.Inode, out), 0
}

// Getattr returns n's attributes: an open file's own size and times while
// this mount has changes of it not yet committed.
func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx = detach(ctx)
	f := n.fs
	if n.gone.Load() {
		n.goneAttr(&out.Attr)
		return 0
	}
	p := n.path()
	st, err := f.stat(ctx, p)
	if fh != nil && (errors.Is(err, fs.ErrNotExist) || err == nil && n.knownID() != 0 && st.Inode.ID != n.knownID()) {
		// fstat of a file that another client removed, or renamed
		// another over, while this descriptor was open: it lives on,
		// with no name, as POSIX has it.
		if of := f.openOf(n.StableAttr().Ino); of != nil {
			n.goneAttr(&out.Attr)
			return 0
		}
	}
	if err != nil {
		return f.errno("getattr", p, err)
	}
	n.remember(&st.Inode)
	f.fillAttr(&st.Inode, &out.Attr)
	_, attr := f.cacheFor(p)
	out.SetTimeout(attr)
	return 0
}

// Setattr changes mode, owner, size and times. A size change goes through
// the file's contents (file.go: truncate), the rest is one SetAttr.
func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = detach(ctx)
	if n.gone.Load() {
		return n.setattrGone(ctx, in, out)
	}
	f, p := n.fs, n.path()
	f.own.note(p)
	if size, ok := in.GetSize(); ok {
		if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return syscall.EISDIR
		}
		if err := f.truncate(ctx, n, int64(size)); err != nil {
			return f.setattrErrno(p, err)
		}
	}
	req := rpc.SetAttrRequest{Path: p}
	changed := false
	if m, ok := in.GetMode(); ok {
		m &= 0o7777
		req.Mode, changed = &m, true
	}
	if uid, ok := in.GetUID(); ok {
		req.UID, changed = &uid, true
	}
	if gid, ok := in.GetGID(); ok {
		req.GID, changed = &gid, true
	}
	if t, ok := in.GetATime(); ok {
		ns := t.UnixNano()
		req.Atime, changed = &ns, true
	}
	if t, ok := in.GetMTime(); ok {
		ns := t.UnixNano()
		req.Mtime, changed = &ns, true
		if of := f.openOf(n.StableAttr().Ino); of != nil {
			of.setMtime(ns) // a later commit keeps it
		}
	}
	if changed {
		// Only to the inode the kernel means: another client may have
		// replaced the file at p (a rename over it) since the kernel
		// looked the name up.
		req.IfID = n.knownID()
		err := f.retry(ctx, func(ctx context.Context) error {
			_, err := f.c.SetAttr(ctx, &req)
			return err
		})
		if errors.Is(err, rpc.ErrVersionMismatch) {
			// Linux looks a path up again and retries the call on ESTALE
			// (chmod, chown, utimensat); on a descriptor, the caller sees
			// it, as on NFS.
			f.log.Debug("setattr of a file another client replaced", "path", p, "err", err)
			return syscall.ESTALE
		}
		if err != nil {
			return f.setattrErrno(p, err)
		}
	}
	return n.Getattr(ctx, fh, out)
}

// setattrGone applies a setattr to a removed inode still open: to what
// this mount knows of it (nothing is left in the cluster to change).
func (n *node) setattrGone(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	l := rpc.Inode{Type: rpc.TypeFile}
	if p := n.last.Load(); p != nil {
		l = *p
	}
	if m, ok := in.GetMode(); ok {
		l.Mode = m & 0o7777
	}
	if uid, ok := in.GetUID(); ok {
		l.UID = uid
	}
	if gid, ok := in.GetGID(); ok {
		l.GID = gid
	}
	if t, ok := in.GetATime(); ok {
		l.Atime = t.UnixNano()
	}
	if t, ok := in.GetMTime(); ok {
		l.Mtime = t.UnixNano()
	}
	l.Ctime = time.Now().UnixNano()
	if size, ok := in.GetSize(); ok {
		if of := n.fs.openOf(n.StableAttr().Ino); of != nil {
			if err := of.f.Truncate(ctx, int64(size)); err != nil {
				return n.fs.errno("setattr", "(unlinked)", err)
			}
		}
	}
	n.remember(&l)
	n.goneAttr(&out.Attr)
	return 0
}

// setattrErrno is errno for setattr: Linux answers EPERM, not EACCES, to
// a chmod, chown or utimes the caller may not make.
func (f *FS) setattrErrno(p string, err error) syscall.Errno {
	if errors.Is(err, fs.ErrPermission) {
		return syscall.EPERM
	}
	return f.errno("setattr", p, err)
}

// Mkdir makes directory name in n.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	p, e := n.checkedChild(name)
	if e != 0 {
		return nil, e
	}
	f := n.fs
	uid, gid, mode := f.owner(ctx, mode)
	req := &rpc.MkdirRequest{Path: p, Mode: mode, UID: uid, GID: gid}
	var in rpc.Inode
	f.own.note(p)
	err := f.change(ctx, func(ctx context.Context) error {
		resp, err := f.c.Mkdir(ctx, req)
		if err == nil {
			in = resp.Inode
		}
		return err
	}, func(ctx context.Context) bool {
		st, err := f.stat(ctx, p)
		if err == nil && st.Type == rpc.TypeDir {
			in = st.Inode
			return true
		}
		return false
	})
	if err != nil {
		return nil, f.errno("mkdir", p, err)
	}
	return f.newChild(ctx, n, &in, out), 0
}

// Symlink makes name in n a symbolic link to target.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	if e := checkPath(target); e != 0 {
		return nil, e
	}
	p, e := n.checkedChild(name)
	if e != 0 {
		return nil, e
	}
	f := n.fs
	uid, gid, _ := f.owner(ctx, 0o777)
	in, err := f.create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o777, UID: uid, GID: gid, Symlink: target})
	if err != nil {
		return nil, f.errno("symlink", p, err)
	}
	return f.newChild(ctx, n, in, out), 0
}

// Link makes name in n another name of target's inode (link(2)). go-fuse
// keeps one inode per inode number, the cluster's id, so the kernel sees
// one inode with two names. The kernel refuses to link a directory itself
// (EPERM).
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	p, e := n.checkedChild(name)
	if e != 0 {
		return nil, e
	}
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if t.gone.Load() {
		return nil, syscall.ENOENT // an open file whose last name went: as Linux answers
	}
	f, old := n.fs, t.path()
	f.own.note(old, p)
	var in *rpc.Inode
	err := f.change(ctx, func(ctx context.Context) error {
		var err error
		in, err = f.c.Link(ctx, old, p)
		return err
	}, func(ctx context.Context) bool { // the new name is there, with the target's id
		st, err := f.stat(ctx, p)
		if err == nil && st.Inode.ID == t.knownID() && st.Inode.ID != 0 {
			in = &st.Inode
			return true
		}
		return false
	})
	if err != nil {
		return nil, f.errno("link", p, err)
	}
	return f.newChild(ctx, n, in, out), 0
}

// Mknod makes name in n a FIFO, a socket or a device (mknod(2), mkfifo(3),
// bind(2) of a Unix socket), or a regular file without contents. The
// cluster keeps their metadata; opening one is the kernel's business, as
// with any file system.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	p, e := n.checkedChild(name)
	if e != 0 {
		return nil, e
	}
	f := n.fs
	req := &rpc.CreateRequest{Path: p, Type: typeOfBits(mode)}
	switch req.Type {
	case rpc.TypeFile:
		req.Layout = contents.Layout{BlockSize: contents.DefaultBlockSize}.Encode()
	case rpc.TypeCharDev, rpc.TypeBlockDev:
		req.Rdev = uint64(dev)
	case rpc.TypeFIFO, rpc.TypeSocket:
	default:
		return nil, syscall.EINVAL
	}
	req.UID, req.GID, req.Mode = f.owner(ctx, mode)
	in, err := f.create(ctx, req)
	if errors.Is(err, errors.ErrUnsupported) {
		f.log.Warn("the cluster cannot keep special files yet", "op", "mknod", "path", p, "err", err)
		return nil, syscall.EOPNOTSUPP
	}
	if err != nil {
		return nil, f.errno("mknod", p, err)
	}
	return f.newChild(ctx, n, in, out), 0
}

// create creates a file, a symbolic link or a special file (an inode of
// the kind asked for there after a lost answer is taken as this create's:
// f.change).
func (f *FS) create(ctx context.Context, req *rpc.CreateRequest) (*rpc.Inode, error) {
	want := cmp.Or(req.Type, rpc.TypeFile)
	if req.Symlink != "" {
		want = rpc.TypeSymlink
	}
	var in rpc.Inode
	f.own.note(req.Path)
	err := f.change(ctx, func(ctx context.Context) error {
		resp, err := f.c.Create(ctx, req)
		if err == nil {
			in = resp.Inode
		}
		return err
	}, func(ctx context.Context) bool {
		st, err := f.stat(ctx, req.Path)
		if err == nil && st.Type == want {
			in = st.Inode
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return &in, nil
}

// Readlink returns a symbolic link's target.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = detach(ctx)
	f, p := n.fs, n.path()
	st, err := f.stat(ctx, p)
	if err != nil {
		return nil, f.errno("readlink", p, err)
	}
	if st.Type != rpc.TypeSymlink {
		return nil, syscall.EINVAL
	}
	return []byte(st.Target), 0
}

// Unlink removes file or symbolic link name from n.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(detach(ctx), "unlink", name, n.fs.c.Unlink)
}

// remove removes name from n with call (the client's Unlink or Rmdir),
// settling a lost answer by looking the name up (f.change).
func (n *node) remove(ctx context.Context, op, name string, call func(context.Context, string) error) syscall.Errno {
	f, p := n.fs, n.child(name)
	f.own.note(p)
	err := f.change(ctx, func(ctx context.Context) error { return call(ctx, p) }, f.gone(p))
	if err != nil {
		return f.errno(op, p, err)
	}
	f.removed(n.GetChild(name))
	return 0
}

// gone returns a check that p no longer exists (f.change).
func (f *FS) gone(p string) func(ctx context.Context) bool {
	return func(ctx context.Context) bool {
		_, err := f.stat(ctx, p)
		return errors.Is(err, fs.ErrNotExist)
	}
}

// Rmdir removes empty directory name from n.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(detach(ctx), "rmdir", name, n.fs.c.Rmdir)
}

// Rename moves name in n to newName in newParent. RENAME_NOREPLACE is
// kept; RENAME_EXCHANGE is refused with EINVAL (not built).
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	if e := checkName(newName); e != 0 {
		return e
	}
	const renameNoReplace, renameExchange = 1, 2 // linux/fs.h
	if flags&renameExchange != 0 || flags&^(renameNoReplace|renameExchange) != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	f, src, dst := n.fs, n.child(name), np.child(newName)
	if e := checkPath(dst); e != 0 {
		return e
	}
	replaced := np.GetChild(newName)
	req := &rpc.RenameRequest{Src: src, Dst: dst, NoReplace: flags&renameNoReplace != 0}
	f.own.note(src, dst)
	err := f.change(ctx, func(ctx context.Context) error {
		_, err := f.c.RenameWith(ctx, req)
		return err
	}, func(ctx context.Context) bool { // the source is gone and the destination is there
		_, derr := f.stat(ctx, dst)
		return f.gone(src)(ctx) && derr == nil
	})
	if err != nil {
		return f.errno("rename", src, err)
	}
	if replaced != nil && replaced != n.GetChild(name) {
		f.removed(replaced)
	}
	return 0
}

// removed marks ch, a name of which this mount just removed, as gone,
// and its open file, if any, as unlinked (file.go), unless the inode has
// other names (a hard link's: its link count, as this mount last read it,
// says so), which go on naming it.
func (f *FS) removed(ch *gofs.Inode) {
	if ch == nil {
		return
	}
	nd := ch.Operations().(*node)
	if l := nd.last.Load(); l != nil && l.Type != rpc.TypeDir && l.Nlink > 1 {
		c := *l
		c.Nlink--
		nd.last.Store(&c)
		return
	}
	nd.gone.Store(true)
	if of := f.openOf(ch.StableAttr().Ino); of != nil {
		of.unlinked.Store(true)
	}
}

// Readdir lists n, with "." and "..".
func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	ctx = detach(ctx)
	f, p := n.fs, n.path()
	var ents []rpc.DirEntry
	err := f.retry(ctx, func(ctx context.Context) error {
		var err error
		ents, err = f.c.ReadDirAll(ctx, p, readDirPage)
		return err
	})
	if err != nil {
		return nil, f.errno("readdir", p, err)
	}
	self := n.StableAttr().Ino
	parent := self
	if _, pn := n.Parent(); pn != nil {
		parent = pn.StableAttr().Ino
	}
	out := make([]fuse.DirEntry, 0, len(ents)+2)
	out = append(out,
		fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: self},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: parent})
	for _, e := range ents {
		ino := e.ID
		if ino == 0 {
			ino = inoOf(&rpc.Inode{Path: path.Join(p, e.Name)})
		}
		out = append(out, fuse.DirEntry{Name: e.Name, Mode: typeBits(e.Type), Ino: ino})
	}
	f.accessed(ctx, n)
	return gofs.NewListDirStream(out), 0
}

// readDirPage is the page size of a listing.
const readDirPage = 1000

// Statfs reports the file system's size and use (statfs.go).
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx = detach(ctx)
	n.fs.statfs(ctx, out)
	return 0
}

// Open opens a file (file.go).
func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	return n.fs.openFile(ctx, n, flags)
}

// Create creates and opens file name in n. Without O_EXCL an existing
// file is opened instead (truncated with O_TRUNC), as open(2) does.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	p, e := n.checkedChild(name)
	if e != 0 {
		return nil, nil, 0, e
	}
	f := n.fs
	uid, gid, mode := f.owner(ctx, mode)
	now := time.Now().UnixNano()
	// A layout, even of no block, marks a file whose contents are in the
	// data store (an imported file has none: its contents are elsewhere).
	layout := contents.Layout{BlockSize: contents.DefaultBlockSize}.Encode()
	in, err := f.create(ctx, &rpc.CreateRequest{Path: p, Mode: mode, UID: uid, GID: gid, Atime: now, Mtime: now, Layout: layout})
	if errors.Is(err, fs.ErrExist) && flags&syscall.O_EXCL == 0 {
		st, serr := f.stat(ctx, p)
		if serr != nil {
			return nil, nil, 0, f.errno("create", p, serr)
		}
		if st.Type == rpc.TypeDir {
			return nil, nil, 0, syscall.EISDIR
		}
		ch := f.newChild(ctx, n, &st.Inode, out)
		fh, fl, e := f.openFile(ctx, ch.Operations().(*node), flags)
		return ch, fh, fl, e
	}
	if err != nil {
		return nil, nil, 0, f.errno("create", p, err)
	}
	ch := f.newChild(ctx, n, in, out)
	fh, fl, e := f.openCreated(ctx, ch.Operations().(*node), in, flags)
	return ch, fh, fl, e
}

// Fsync of a directory (or of a file with no handle) has nothing to do:
// every metadata change is durable in the cluster (committed to its
// shards' Raft logs) when the operation returns.
func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	return 0
}
