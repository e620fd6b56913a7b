package mount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/rpc"
)

// Open files and close-to-open consistency (docs/design.md, "Mount").
//
// While any handle of an inode is open, the mount holds one openFile for
// it: the file's contents (a contents.File: cached clean blocks, buffered
// dirty ones) shared by the handles. Open reads the inode afresh (size,
// layout, version), so it sees what any mount committed before; flush
// (close), fsync and release commit this mount's changes: the dirty blocks
// are uploaded first, then the new size and layout are written with the
// inode's version as a precondition, merged into whatever another mount
// committed meanwhile (contents.Merge: last close wins per block). So once
// close or fsync returns, any mount that opens the file sees its contents.

// openFile is an inode this mount has open.
type openFile struct {
	fs *FS
	n  *node
	id uint64 // the inode's id: its contents' key
	f  *contents.File

	refs int // open handles; guarded by fs.mu

	mu      sync.Mutex // serializes commits
	version uint64     // the inode's version this mount last read or wrote; guarded by mu
	// base is the inode as this mount last read or wrote it (its size
	// and layout at version); guarded by mu. A commit first assumes
	// nobody changed it since, and reads it again only if the cluster
	// says otherwise (IfVersion).
	base rpc.Inode
	// mtime is the modification time of changes not yet committed (Unix
	// ns; 0: none).
	mtime atomic.Int64
	// unlinked is set once this mount removed the file's last name (an
	// unlink, or a rename over it) while it was open: its handles keep
	// reading and writing its contents, as POSIX keeps an unlinked open
	// file, and nothing is committed any more.
	unlinked atomic.Bool

	// holdAt is the shard that holds the file's contents while it is open
	// (holds.go): its record's for a file with several names, its home's
	// otherwise; held says whether a hold there has been answered since.
	// Guarded by fs.mu.
	holdAt string
	held   bool
}

func (of *openFile) path() string { return of.n.path() }

// setBase records st as the inode this mount last read or wrote, and
// where the file's contents are held; called with of.mu held.
func (of *openFile) setBase(st *rpc.Inode) {
	of.version, of.base = st.Version, *st
	f := of.fs
	f.mu.Lock()
	if h := holdShard(st); h != of.holdAt {
		of.holdAt, of.held = h, false
	}
	f.mu.Unlock()
}

// setMtime records a change's modification time, committed with it.
func (of *openFile) setMtime(ns int64) { of.mtime.Store(ns) }

// localAttr overrides attributes the cluster does not have yet: the size
// and time of changes not committed.
func (of *openFile) localAttr(a *fuse.Attr) {
	if !of.f.Dirty() && of.mtime.Load() == 0 {
		return
	}
	a.Size = uint64(of.f.Size())
	a.Blocks = (a.Size + 511) / 512
	if ns := of.mtime.Load(); ns != 0 {
		a.Mtime, a.Mtimensec = uint64(ns/1e9), uint32(ns%1e9)
		a.Ctime, a.Ctimensec = a.Mtime, a.Mtimensec
	}
}

// openOf returns the open file of inode number ino, or nil.
func (f *FS) openOf(ino uint64) *openFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open[ino]
}

// acquire returns n's open file with one more reference, opening it from
// st (the inode as just read) if it is not open. An open file with nothing
// to commit whose inode another mount changed is reset to st.
func (f *FS) acquire(n *node, st *rpc.Inode) (*openFile, error) {
	if st.ID == 0 {
		return nil, fmt.Errorf("%s: %w: the inode has no id yet (made before inode ids; its shard's leader assigns one)", st.Path, rpc.ErrUnavailable)
	}
	layout, err := contents.DecodeLayout(st.Layout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", st.Path, err)
	}
	ino := n.StableAttr().Ino
	f.mu.Lock()
	of := f.open[ino]
	if of == nil {
		of = &openFile{fs: f, n: n, id: st.ID, refs: 1, version: st.Version, base: *st, holdAt: holdShard(st)}
		of.f = f.data.OpenFile(st.ID, st.Size, layout, f.opts.FileOptions)
		f.open[ino] = of
		f.mu.Unlock()
		f.kickHolds() // its contents stay while it is open (holds.go)
		return of, nil
	}
	of.refs++
	f.mu.Unlock()
	// Lock order: of.mu, then f.mu (commit); never the other way round.
	of.mu.Lock()
	if of.version != st.Version && !of.f.Dirty() && of.mtime.Load() == 0 {
		of.f.Reset(st.Size, layout)
		of.setBase(st)
	}
	of.mu.Unlock()
	return of, nil
}

// release drops a reference; the last one closes the contents.
func (f *FS) release(of *openFile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if of.refs--; of.refs > 0 {
		return
	}
	ino := of.n.StableAttr().Ino
	if f.open[ino] == of {
		delete(f.open, ino)
	}
	of.f.Close()
}

// handle is one open(2) of a file.
type handle struct {
	of    *openFile
	write bool
	// noData is set for a file whose metadata was imported without its
	// contents (a size and no layout): reads fail with EIO.
	noData bool
	// read is set by the handle's first read, which records the access
	// (atime.go).
	read atomic.Bool
}

var (
	_ gofs.FileGetattrer = (*handle)(nil)
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileFlusher   = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
)

// openFile opens n with open(2)'s flags.
func (f *FS) openFile(ctx context.Context, n *node, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	p := n.path()
	st, err := f.stat(ctx, p)
	if err != nil {
		return nil, 0, f.errno("open", p, err)
	}
	if st.Type == rpc.TypeDir {
		return nil, 0, syscall.EISDIR
	}
	return f.openInode(ctx, n, &st.Inode, flags)
}

// openCreated opens a file Create just made. It is empty: O_TRUNC has
// nothing to cut, and honouring it would set a modification time that
// close then commits, a second write to the cluster for every new file.
func (f *FS) openCreated(ctx context.Context, n *node, in *rpc.Inode, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return f.openInode(ctx, n, in, flags&^syscall.O_TRUNC)
}

func (f *FS) openInode(ctx context.Context, n *node, in *rpc.Inode, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	of, err := f.acquire(n, in)
	if err != nil {
		return nil, 0, f.errno("open", in.Path, err)
	}
	h := &handle{of: of, write: write, noData: in.Size > 0 && len(in.Layout) == 0}
	if flags&syscall.O_TRUNC != 0 && write {
		if err := of.f.Truncate(ctx, 0); err != nil {
			f.release(of)
			return nil, 0, f.errno("open", in.Path, err)
		}
		of.setMtime(time.Now().UnixNano())
		h.noData = false
	}
	var fuseFlags uint32
	f.mu.Lock()
	if v, ok := f.seen[of.id]; ok && v == in.Version {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE // nobody changed it since the kernel cached it
	}
	f.seen[of.id] = in.Version
	f.mu.Unlock()
	return h, fuseFlags, 0
}

// Getattr answers fstat(2): from the cluster, or for a file unlinked
// while open from what this mount knows of it (with no link).
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	ctx = detach(ctx)
	return h.of.n.Getattr(ctx, h, out)
}

// Read reads from the file's contents.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx = detach(ctx)
	of := h.of
	if h.noData && !of.f.Dirty() {
		of.fs.log.Error("the file's metadata was imported without its contents", "path", of.path())
		return nil, syscall.EIO
	}
	n, err := of.f.ReadAt(ctx, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, of.fs.errno("read", of.path(), err)
	}
	if !h.read.Swap(true) && !of.unlinked.Load() {
		of.fs.accessed(ctx, of.n)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write buffers data at off (contents.File uploads full blocks at once).
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx = detach(ctx)
	of := h.of
	n, err := of.f.WriteAt(ctx, data, off)
	of.setMtime(time.Now().UnixNano())
	if err != nil {
		return uint32(n), of.fs.errno("write", of.path(), err)
	}
	return uint32(n), 0
}

// Flush commits the file's changes at close(2): once it returns, any
// mount that opens the file sees them.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	ctx = detach(ctx)
	if !h.write {
		return 0
	}
	of := h.of
	if err := of.fs.commit(ctx, of); err != nil {
		return of.fs.errno("close", of.path(), err)
	}
	return 0
}

// Fsync commits the file's changes.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	of := h.of
	if err := of.fs.commit(ctx, of); err != nil {
		return of.fs.errno("fsync", of.path(), err)
	}
	return 0
}

// Release commits what flush did not (a handle closed without flush) and
// drops the handle.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx = detach(ctx)
	of := h.of
	var e syscall.Errno
	if h.write {
		if err := of.fs.commit(ctx, of); err != nil {
			e = of.fs.errno("release", of.path(), err)
		}
	}
	of.fs.release(of)
	return e
}

// commitRetries bounds the attempts of a commit whose inode another mount
// changes each time between the read and the write.
const commitRetries = 20

// commit writes of's changes: the dirty blocks to the data store, then its
// size, layout and modification time to the cluster, merged into the
// inode as it is now, under its version (docs/design.md, "Mount").
func (f *FS) commit(ctx context.Context, of *openFile) error {
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.unlinked.Load() {
		return nil // no name left to commit to: the contents go at the last close
	}
	c, err := of.f.Flush(ctx)
	if err != nil {
		return fmt.Errorf("uploading: %w", err)
	}
	mtime := of.mtime.Load()
	if c == nil && mtime == 0 {
		return nil
	}
	if mtime == 0 {
		mtime = time.Now().UnixNano()
	}
	p := of.path()
	f.own.note(p)
	for attempt := 0; ; attempt++ {
		// First as this mount knows the inode; after a version mismatch
		// (another mount committed), as the cluster has it now.
		st := &of.base
		if attempt > 0 {
			fresh, err := f.stat(ctx, p)
			if err == nil && fresh.ID != of.id {
				err = fmt.Errorf("%w: it names inode %d now", fs.ErrNotExist, fresh.ID)
			}
			if errors.Is(err, fs.ErrNotExist) {
				// Another client removed the file or replaced it (a
				// rename over it): this mount's changes belong to the
				// inode that lost its name, which POSIX keeps for its
				// open descriptors only, as after this mount's own unlink.
				// No attempt was applied (each got a version
				// mismatch), so the objects uploaded for c are
				// this mount's alone: they go at the last close.
				f.log.Info("the file was removed or replaced by another client while open here; its changes stay with this mount's open descriptors",
					"path", p, "ino", of.id, "err", err)
				of.unlinked.Store(true)
				of.f.Withdraw(c)
				return nil
			}
			if err != nil {
				return err
			}
			st = &fresh.Inode
		}
		cur, err := contents.DecodeLayout(st.Layout)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		layout, size := cur, st.Size
		if c != nil {
			layout, size = contents.Merge(cur, st.Size, c)
		} else if len(st.Layout) == 0 {
			layout.BlockSize = contents.DefaultBlockSize
		}
		version := st.Version
		req := &rpc.SetAttrRequest{Path: p, Size: &size, Layout: layout.Encode(), Mtime: &mtime, IfVersion: &version, IfID: of.id}
		var resp *rpc.SetAttrResponse
		err = f.retry(ctx, func(ctx context.Context) error {
			var err error
			resp, err = f.c.SetAttr(ctx, req)
			return err
		})
		if errors.Is(err, rpc.ErrVersionMismatch) && attempt < commitRetries {
			continue
		}
		if err != nil {
			return err
		}
		of.f.Committed(c, layout, size)
		of.setBase(&resp.Inode)
		of.n.remember(&resp.Inode)
		of.mtime.CompareAndSwap(mtime, 0)
		f.mu.Lock()
		f.seen[of.id] = of.version
		f.mu.Unlock()
		return nil
	}
}

// truncate sets n's size through its contents (a shrink rewrites the
// block it ends in, contents.File.Truncate) and commits it.
func (f *FS) truncate(ctx context.Context, n *node, size int64) error {
	of := f.openOf(n.StableAttr().Ino)
	if of == nil {
		st, err := f.stat(ctx, n.path())
		if err != nil {
			return err
		}
		if st.Type != rpc.TypeFile {
			return fmt.Errorf("%s: %w", st.Path, fs.ErrInvalid)
		}
		if of, err = f.acquire(n, &st.Inode); err != nil {
			return err
		}
	} else {
		f.mu.Lock()
		of.refs++
		f.mu.Unlock()
	}
	defer f.release(of)
	if err := of.f.Truncate(ctx, size); err != nil {
		return err
	}
	of.setMtime(time.Now().UnixNano())
	return f.commit(ctx, of)
}
