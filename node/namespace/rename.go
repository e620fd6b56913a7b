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
	s, err := CleanPath(src)
	if err != nil {
		return nil, err
	}
	d, err := CleanPath(dst)
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
	s, err := CleanPath(r.Src)
	if err != nil {
		return nil, err
	}
	d, err := CleanPath(r.Dst)
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

func (h *home) coordRenameOnce(ctx context.Context, r *homeRenameReq) (*homeRenameResp, error) {
	src, dst := r.Src, r.Dst
	sdir, sname := splitPath(src)
	ddir, dname := splitPath(dst)
	op, err := h.beginParentOp(ctx, sdir, src, []string{src, dst}, []string{sdir, ddir}, []string{src, dst}, nil)
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
	// The destination's directory, for the checks and the moved inodes'
	// ancestor codes: when it is another, as a stat reads it (not under
	// this operation's locks; its version is required where its entry is
	// written, so a change meanwhile retries the rename).
	ddino := op.dino
	if ddir != sdir {
		st, err := h.r.Stat(ctx, ddir)
		if err != nil {
			return nil, err
		}
		ddino = storeInode(&st.Inode)
		if ddino.Type != store.TypeDir {
			return nil, fmt.Errorf("%s: %s: %w", dst, ddir, rpc.ErrNotDir)
		}
		if err := allowDir(r.Caller, ddir, &ddino, acl.Write|acl.Execute); err != nil {
			return nil, err
		}
	}
	chain := wireCodes(store.ChildAncestors(store.PathDepth(ddir), &ddino))
	var dirVersion uint64 // 0: the destination directory is the source's, under this operation
	if ddir != sdir {
		dirVersion = ddino.Version
	}
	se, err := h.entry(ctx, sdir, sname)
	if err != nil {
		return nil, err
	}
	srcType := typeString(se.Type)
	srcOwner := stickyOwner(r.Caller, &op.dino)
	if srcOwner != nil && srcType == rpc.TypeDir {
		// A directory's inode is re-keyed by every shard: its owner as a
		// stat reads it (not under this operation's locks).
		st, err := h.r.Stat(ctx, src)
		if err != nil {
			return nil, err
		}
		sino := storeInode(&st.Inode)
		if err := checkOwner(src, &sino, srcOwner); err != nil {
			return nil, err
		}
	}
	// The destination's parent and entry.
	dhome := h.id
	if ddir != sdir {
		dl, err := h.r.locateTarget(ctx, target{path: ddir, child: dst, dir: true})
		if err != nil {
			return nil, err
		}
		dhome = dl.shard
	}
	de, err := h.r.getEntry(ctx, dhome, ddir, dname)
	if err != nil {
		return nil, err
	}
	switch {
	case de.NotHome:
		return nil, errBusy // the destination parent moved: again
	case de.NotDir:
		return nil, fmt.Errorf("%s: %s: %w", dst, ddir, rpc.ErrNotDir)
	}
	if de.Exists {
		dType := de.Entry.Type
		switch {
		case r.NoReplace:
			return nil, fmt.Errorf("%s: %w", dst, fs.ErrExist)
		case isUnder(src, dst): // dst is an ancestor of src: a non-empty directory
			if srcType != rpc.TypeDir {
				return nil, fmt.Errorf("%s: %w", dst, rpc.ErrIsDir)
			}
			return nil, fmt.Errorf("%s: %w", dst, rpc.ErrNotEmpty)
		case srcType == rpc.TypeDir && dType != rpc.TypeDir:
			return nil, fmt.Errorf("%s: %w", dst, rpc.ErrNotDir)
		case srcType != rpc.TypeDir && dType == rpc.TypeDir:
			return nil, fmt.Errorf("%s: %w", dst, rpc.ErrIsDir)
		}
	}
	plan := h.newPlan(op.txn)
	// The destination entry carries the moved inode's id, which the
	// rename keeps (docs/design.md, "Inode ids"): the source entry's, or,
	// for an entry written before ids existed, the inode's when it is
	// homed here.
	newEnt := rpc.DirEntry{Name: dname, Type: srcType, Home: se.Home, ID: se.ID}
	if se.ID == 0 && se.Home == h.id {
		if ino, err := h.st.GetInode(ctx, src); err == nil {
			newEnt.ID = ino.ID
		}
	}
	// Entries: the source entry is deleted here at the commit point; the
	// destination entry is written here too, or staged at its home.
	var putHere bool
	if dhome == h.id {
		putHere = true
	} else {
		op := txnOp{Kind: opPutEntry, Path: ddir, Entry: &newEnt, DirVersion: dirVersion}
		if de.Exists {
			op.ExpectHome, op.ExpectType = de.Entry.Home, de.Entry.Type
		} else {
			op.ExpectAbsent = true
		}
		plan.add(dhome, h.id, []string{dst}, op)
	}
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
	// Inodes: a replaced destination is deleted first.
	if de.Exists {
		plan.add(de.Entry.Home, h.id, []string{dst}, txnOp{
			Kind: opDelInode, Path: dst, Type: de.Entry.Type, EmptyDir: de.Entry.Type == rpc.TypeDir,
			RequireOwner: stickyOwner(r.Caller, &ddino),
		})
	}
	if srcType != rpc.TypeDir {
		plan.add(se.Home, h.id, []string{src, dst}, txnOp{
			Kind: opMoveInode, Path: src, New: dst, Type: srcType, Ctime: time.Now().UnixNano(),
			RequireOwner: srcOwner, Ancestors: chain,
		})
	} else {
		for _, s := range h.r.peers.Load().shards {
			plan.add(s.ID, h.id, []string{src, dst}, txnOp{Kind: opRekey, Path: src, New: dst, Ancestors: chain})
		}
		if plan.parts[h.id] == nil || !hasSubtreeOp(plan.parts[h.id].Ops) {
			plan.add(h.id, h.id, []string{src, dst}, txnOp{Kind: opRekey, Path: src, New: dst, Ancestors: chain})
		}
	}
	rekeyed, err := h.runTxn(ctx, plan)
	if err != nil {
		return nil, fmt.Errorf("rename %s to %s: %w", src, dst, err)
	}
	return &homeRenameResp{Rekeyed: rekeyed, Hops: len(plan.parts)}, nil
}
