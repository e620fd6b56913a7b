package namespace

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Rename renames src to dst, atomically to observers (POSIX-ish): a file
// replaces an existing file at dst; a directory replaces an empty
// directory at dst (a non-empty one: rpc.ErrNotEmpty); a file onto a
// directory is rpc.ErrIsDir, a directory onto a file rpc.ErrNotDir; moving
// a directory into its own subtree, or renaming "/", is
// rpc.ErrInvalidPath.
//
// The source parent's shard coordinates. A file keeps its shard: its inode
// is re-keyed there, the source entry deleted and the destination entry
// written (at the destination parent's shard), and a replaced file's inode
// deleted in its shard, all in one transaction. A directory rename is a
// transaction with every shard of the cluster: each re-keys the part of
// the subtree it homes (Replica.Rekey, forward-only, through its log);
// operations under either name wait at each shard until its part is done.
// Every shard needs a live majority.
func (n *Namespace) Rename(ctx context.Context, src, dst string) (*rpc.RenameResponse, error) {
	return n.RenameWith(ctx, &rpc.RenameRequest{Src: src, Dst: dst})
}

// RenameWith is Rename with r's options: with r.NoReplace an existing
// destination fails the rename with fs.ErrExist, checked in the rename's
// own transaction (the destination entry is required absent where it is
// written), so a name created meanwhile is never replaced.
func (n *Namespace) RenameWith(ctx context.Context, r *rpc.RenameRequest) (*rpc.RenameResponse, error) {
	src, dst := r.Src, r.Dst
	s, d, err := cleanPaths(src, dst)
	if err != nil {
		return nil, err
	}
	if s == "/" || d == "/" {
		return nil, fmt.Errorf("%w: cannot rename the root", rpc.ErrInvalidPath)
	}
	if strictlyUnder(d, s) {
		return nil, fmt.Errorf("%w: cannot move %s into its own subtree (%s)", rpc.ErrInvalidPath, s, d)
	}
	if s == d {
		if _, err := n.locate(ctx, s, false); err != nil {
			return nil, err
		}
		if r.NoReplace {
			return nil, fmt.Errorf("%s: %w", d, fs.ErrExist)
		}
		return &rpc.RenameResponse{}, nil
	}
	sdir, _ := splitPath(s)
	req := &homeRenameReq{Src: s, Dst: d, NoReplace: r.NoReplace, Caller: caller(ctx)}
	resp, _, err := atHome(ctx, n, target{path: sdir, child: s, dir: true}, methodHomeRename, req, (*home).coordRename)
	if err != nil {
		return nil, err
	}
	return &rpc.RenameResponse{Rekeyed: resp.Rekeyed}, nil
}

func (h *home) handleHomeRename(ctx context.Context, r *homeRenameReq) (*homeRenameResp, error) {
	s, d, err := cleanPaths(r.Src, r.Dst)
	if err != nil {
		return nil, err
	}
	if s == "/" || d == "/" || isUnder(d, s) {
		return nil, fmt.Errorf("%w: cannot rename %s to %s", rpc.ErrInvalidPath, s, d)
	}
	r.Src, r.Dst = s, d
	return h.coordRename(ctx, r)
}

// coordRename renames at the source parent's home (this node).
func (h *home) coordRename(ctx context.Context, r *homeRenameReq) (*homeRenameResp, error) {
	return retryBusy(ctx, h, func() (*homeRenameResp, error) { return h.coordRenameOnce(ctx, r) })
}

// renameEnds is what one attempt of a rename reads of its two ends before
// it plans its transaction.
type renameEnds struct {
	src, dst    string
	sdir, sname string
	ddir, dname string
	// ddino is the destination's directory (the source parent's inode, op.dino,
	// when it is the same); dirVersion its version to require where the
	// destination entry is written, 0 when it is the source's, under this
	// operation; chain the moved inodes' ancestor codes under it.
	ddino      store.Inode
	dirVersion uint64
	chain      []rpc.AncestorCode
	// se is the source entry, srcType its type, srcOwner the owner a
	// sticky source parent requires of it (nil: any).
	se       store.Entry
	srcType  string
	srcOwner *uint32
	// dhome is the destination parent's home, de its answer for the
	// destination entry.
	dhome string
	de    *homeEntryResp
}

// coordRenameOnce is one attempt of coordRename: under the source
// parent's locks it reads the destination's directory, the source and the
// destination entry, checks what the rename may replace, and runs the
// rename's transaction.
func (h *home) coordRenameOnce(ctx context.Context, r *homeRenameReq) (*homeRenameResp, error) {
	e := &renameEnds{src: r.Src, dst: r.Dst}
	e.sdir, e.sname = splitPath(e.src)
	e.ddir, e.dname = splitPath(e.dst)
	op, err := h.beginParentOp(ctx, e.sdir, e.src, []string{e.src, e.dst}, []string{e.sdir, e.ddir}, []string{e.src, e.dst}, nil)
	if err != nil {
		return nil, err
	}
	if op == nil {
		return &homeRenameResp{homeStatus: notHomeHere}, nil
	}
	defer op.end()
	if err := op.allow(r.Caller, acl.Write|acl.Execute); err != nil {
		return nil, err
	}
	if err := h.renameDestDir(ctx, r, op, e); err != nil {
		return nil, err
	}
	if err := h.renameSource(ctx, r, op, e); err != nil {
		return nil, err
	}
	if err := h.renameDestEntry(ctx, r, e); err != nil {
		return nil, err
	}
	if e.de.Exists && e.se.ID != 0 && e.de.Entry.ID == e.se.ID && e.srcType != rpc.TypeDir {
		// Two names of one inode: POSIX has the rename do nothing.
		return &homeRenameResp{}, nil
	}
	plan := h.newPlan(op.txn)
	h.planRenameEntries(ctx, plan, e)
	if err := h.planRenameInodes(ctx, plan, r, e); err != nil {
		return nil, err
	}
	rekeyed, err := h.runTxn(ctx, plan)
	if err != nil {
		// (The retry plans with what a participant found.)
		if stub, ok := learnStub(err, e.src); ok {
			r.srcStub = stub
		}
		if stub, ok := learnStub(err, e.dst); ok {
			r.dstStub = stub
		}
		return nil, fmt.Errorf("rename %s to %s: %w", e.src, e.dst, err)
	}
	return &homeRenameResp{Rekeyed: rekeyed, Hops: len(plan.parts)}, nil
}

// renameDestDir reads the destination's directory into e, for the checks
// and the moved inodes' ancestor codes: when it is another than the
// source's, as a stat reads it (not under this operation's locks; its
// version is required where its entry is written, so a change meanwhile
// retries the rename), checking that it is a directory the caller may
// write.
func (h *home) renameDestDir(ctx context.Context, r *homeRenameReq, op *parentOp, e *renameEnds) error {
	e.ddino = op.dino
	if e.ddir != e.sdir {
		st, err := h.r.Stat(ctx, e.ddir)
		if err != nil {
			return err
		}
		e.ddino = storeInode(&st.Inode)
		if e.ddino.Type != store.TypeDir {
			return fmt.Errorf("%s: %s: %w", e.dst, e.ddir, rpc.ErrNotDir)
		}
		if err := allowDir(r.Caller, e.ddir, &e.ddino, acl.Write|acl.Execute); err != nil {
			return err
		}
	}
	e.chain = wireCodes(store.ChildAncestors(store.PathDepth(e.ddir), &e.ddino))
	if e.ddir != e.sdir {
		e.dirVersion = e.ddino.Version
	}
	return nil
}

// renameSource reads the source entry into e and, in a sticky source
// parent, checks a directory's owner.
func (h *home) renameSource(ctx context.Context, r *homeRenameReq, op *parentOp, e *renameEnds) error {
	se, err := h.entry(ctx, e.sdir, e.sname)
	if err != nil {
		return err
	}
	e.se = se
	e.srcType = typeString(se.Type)
	e.srcOwner = stickyOwner(r.Caller, &op.dino)
	if e.srcOwner != nil && e.srcType == rpc.TypeDir {
		// A directory's inode is re-keyed by every shard: its owner as a
		// stat reads it (not under this operation's locks).
		st, err := h.r.Stat(ctx, e.src)
		if err != nil {
			return err
		}
		sino := storeInode(&st.Inode)
		if err := checkOwner(e.src, &sino, e.srcOwner); err != nil {
			return err
		}
	}
	return nil
}

// renameDestEntry reads the destination's parent and entry into e, and
// checks that the rename may replace what is there.
func (h *home) renameDestEntry(ctx context.Context, r *homeRenameReq, e *renameEnds) error {
	e.dhome = h.id
	if e.ddir != e.sdir {
		dl, err := h.r.locateTarget(ctx, target{path: e.ddir, child: e.dst, dir: true})
		if err != nil {
			return err
		}
		e.dhome = dl.shard
	}
	de, err := h.r.getEntry(ctx, e.dhome, e.ddir, e.dname)
	if err != nil {
		return err
	}
	e.de = de
	switch {
	case de.NotHome:
		return errBusy // the destination parent moved: again
	case de.NotDir:
		return fmt.Errorf("%s: %s: %w", e.dst, e.ddir, rpc.ErrNotDir)
	}
	if !de.Exists {
		return nil
	}
	dType := de.Entry.Type
	switch {
	case r.NoReplace:
		return fmt.Errorf("%s: %w", e.dst, fs.ErrExist)
	case isUnder(e.src, e.dst): // dst is an ancestor of src: a non-empty directory
		if e.srcType != rpc.TypeDir {
			return fmt.Errorf("%s: %w", e.dst, rpc.ErrIsDir)
		}
		return fmt.Errorf("%s: %w", e.dst, rpc.ErrNotEmpty)
	case e.srcType == rpc.TypeDir && dType != rpc.TypeDir:
		return fmt.Errorf("%s: %w", e.dst, rpc.ErrNotDir)
	case e.srcType != rpc.TypeDir && dType == rpc.TypeDir:
		return fmt.Errorf("%s: %w", e.dst, rpc.ErrIsDir)
	}
	return nil
}

// planRenameEntries adds the rename's entries to plan: the source entry
// is deleted here at the commit point; the destination entry is written
// here too, or staged at its home.
func (h *home) planRenameEntries(ctx context.Context, plan *txnPlan, e *renameEnds) {
	// The destination entry carries the moved inode's id, which the
	// rename keeps (docs/design.md, "Inode ids"): the source entry's, or,
	// for an entry written before ids existed, the inode's when it is
	// homed here.
	newEnt := rpc.DirEntry{Name: e.dname, Type: e.srcType, Home: e.se.Home, ID: e.se.ID}
	if e.se.ID == 0 && e.se.Home == h.id {
		if ino, err := h.st.GetInode(ctx, e.src); err == nil {
			newEnt.ID = ino.ID
		}
	}
	de := e.de
	var putHere bool
	if e.dhome == h.id {
		putHere = true
	} else {
		op := txnOp{Kind: opPutEntry, Path: e.ddir, Entry: &newEnt, DirVersion: e.dirVersion}
		if de.Exists {
			op.ExpectHome, op.ExpectType = de.Entry.Home, de.Entry.Type
		} else {
			op.ExpectAbsent = true
		}
		plan.add(e.dhome, h.id, []string{e.dst}, op)
	}
	sdir, sname, ddir, dname, dirVersion := e.sdir, e.sname, e.ddir, e.dname, e.dirVersion
	plan.local = func(b *store.Batch) {
		b.RequireEntryExists(sdir, sname)
		b.DeleteEntry(sdir, sname)
		if putHere {
			if dirVersion != 0 {
				b.RequireInodeVersion(ddir, dirVersion)
			} else {
				b.RequireInodeExists(ddir)
			}
			if de.Exists {
				b.RequireEntryExists(ddir, dname)
			} else {
				b.RequireEntryAbsent(ddir, dname)
			}
			b.PutEntry(ddir, storeEntry(&newEnt))
		}
	}
}

// planRenameInodes adds the rename's inodes to plan: a replaced
// destination is deleted first (one name of an inode with several: its
// stub, and one from its record's count); then a file's inode is moved in its shard,
// or a directory's subtree re-keyed by every shard (this one included).
func (h *home) planRenameInodes(ctx context.Context, plan *txnPlan, r *homeRenameReq, e *renameEnds) error {
	src, dst, de := e.src, e.dst, e.de
	if de.Exists {
		owner := stickyOwner(r.Caller, &e.ddino)
		stub := r.dstStub
		if stub != nil && owner != nil {
			// A stub has no owner: its record has (hardlinks.go).
			if err := h.linkedOwner(ctx, dst, owner); err != nil {
				return err
			}
			owner = nil
		}
		plan.add(de.Entry.Home, h.id, []string{dst}, txnOp{
			Kind: opDelInode, Path: dst, Type: de.Entry.Type, EmptyDir: de.Entry.Type == rpc.TypeDir,
			RequireOwner: owner, Stub: stub,
		})
		if stub != nil {
			linkCount(plan, h.id, stub, -1)
		}
	} else {
		r.dstStub = nil
	}
	if e.srcType != rpc.TypeDir {
		owner := e.srcOwner
		if r.srcStub != nil && owner != nil {
			// A stub has no owner: its record has (hardlinks.go).
			if err := h.linkedOwner(ctx, src, owner); err != nil {
				return err
			}
			owner = nil
		}
		plan.add(e.se.Home, h.id, []string{src, dst}, txnOp{
			Kind: opMoveInode, Path: src, New: dst, Type: e.srcType, Ctime: time.Now().UnixNano(),
			RequireOwner: owner, Ancestors: e.chain, Stub: r.srcStub,
		})
		if r.srcStub != nil {
			// One name of an inode with several: its record's ctime.
			linkCount(plan, h.id, r.srcStub, 0)
		}
		return nil
	}
	for _, s := range h.r.subtreeShards(h.id, e.se.Home) {
		plan.add(s, h.id, []string{src, dst}, txnOp{Kind: opRekey, Path: src, New: dst, Ancestors: e.chain})
	}
	return nil
}
