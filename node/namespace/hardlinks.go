package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Hard links (docs/design.md, "Hard links"). A file with one name is an
// inode at its path, as always. On its first extra name the inode moves
// into a record keyed by its id (store.LinkRecordPath) in the shard that
// homes that first name, its anchor; each name keeps a stub at its path
// (store.Inode.Anchor) with only what belongs to the path, its ancestor
// codes. A stat of a stub answers with the record's attributes
// (localCheck), a change of attributes or contents goes to the record
// (setAttrOnce), the removal of a name takes one from the record's link
// count in the same transaction (coordRemoveOnce, planRenameInodes), and
// its rename sets the record's ctime; the record goes with its last name.

// stubRef names the record of an inode with several names: its anchor
// shard and the inode's id.
type stubRef struct {
	Anchor string `json:"anchor"`
	ID     uint64 `json:"id"`
	// Path, in a prepare's answer (txnPrepareResp.Stub), is the name
	// whose inode the participant found to be (or not to be) a stub.
	Path string `json:"path,omitempty"`
}

// record returns the path that keys the record in its anchor's store.
func (s *stubRef) record() string { return store.LinkRecordPath(s.ID) }

// stubFound is the error of a transaction whose prepare found that a name
// it removes or moves is a stub the coordinator did not know of, or not
// the one it knew (ref.Anchor "": no stub at all). The coordinator plans
// again with what was found; any other caller sees errBusy.
type stubFound struct{ ref *stubRef }

func (e *stubFound) Error() string {
	if e.ref.Anchor == "" {
		return fmt.Sprintf("busy: %s has one name only now", e.ref.Path)
	}
	return fmt.Sprintf("busy: %s is one of inode %d's names (record at %s)", e.ref.Path, e.ref.ID, e.ref.Anchor)
}

func (e *stubFound) Is(target error) bool { return target == errBusy }

// learnStub returns what a failed attempt found at path p (and true): the
// stub, or nil for an inode with one name, for the next attempt's plan.
func learnStub(err error, p string) (*stubRef, bool) {
	var sf *stubFound
	if !errors.As(err, &sf) || sf.ref.Path != p {
		return nil, false
	}
	if sf.ref.Anchor == "" {
		return nil, true
	}
	return sf.ref, true
}

// linkCount is the part of a transaction that changes the link count of
// ref's record by delta, at its anchor.
func linkCount(plan *txnPlan, coord string, ref *stubRef, delta int32) {
	rp := ref.record()
	plan.add(ref.Anchor, coord, []string{rp}, txnOp{Kind: opLinkCount, Path: rp, Delta: delta, Ctime: time.Now().UnixNano()})
}

// Link makes r.New another name of the file at r.Old (link(2)): a
// directory cannot be linked (fs.ErrPermission, as Linux's EPERM), an
// existing r.New is fs.ErrExist. New's parent's shard coordinates one
// transaction with the shard of Old (which turns the inode into a stub
// and a record on its first extra name) or of its record (whose count
// grows), and the new name's shard.
func (n *Namespace) Link(ctx context.Context, r *rpc.LinkRequest) (*rpc.LinkResponse, error) {
	o, nw, err := cleanPaths(r.Old, r.New)
	if err != nil {
		return nil, err
	}
	switch {
	case o == "/":
		return nil, fmt.Errorf("/: %w: a directory cannot be linked", fs.ErrPermission)
	case nw == "/":
		return nil, fmt.Errorf("/: %w", fs.ErrExist)
	}
	dir, _ := splitPath(nw)
	req := &homeLinkReq{Old: o, New: nw, Caller: caller(ctx)}
	resp, _, err := atHome(ctx, n, target{path: dir, child: nw, dir: true}, methodHomeLink, req, (*home).coordLink)
	if err != nil {
		return nil, err
	}
	return &rpc.LinkResponse{Inode: resp.Inode}, nil
}

func (h *home) handleHomeLink(ctx context.Context, r *homeLinkReq) (*homeLinkResp, error) {
	o, nw, err := cleanPaths(r.Old, r.New)
	if err != nil {
		return nil, err
	}
	if o == "/" || nw == "/" {
		return nil, fmt.Errorf("%w: cannot link %s to %s", rpc.ErrInvalidPath, o, nw)
	}
	r.Old, r.New = o, nw
	return h.coordLink(ctx, r)
}

// coordLink links at the new name's parent's home (this node).
func (h *home) coordLink(ctx context.Context, r *homeLinkReq) (*homeLinkResp, error) {
	return retryBusy(ctx, h, func() (*homeLinkResp, error) { return h.coordLinkOnce(ctx, r) })
}

func (h *home) coordLinkOnce(ctx context.Context, r *homeLinkReq) (*homeLinkResp, error) {
	if !h.writesFormat(store.BatchFormatV7) {
		return nil, fmt.Errorf("link %s: %w: a replica of shard %s runs a build without hard links", r.New, errors.ErrUnsupported, h.id)
	}
	ndir, nname := splitPath(r.New)
	op, err := h.beginParentOp(ctx, ndir, r.New, []string{r.New}, []string{ndir}, []string{r.New}, nil)
	if err != nil {
		return nil, err
	}
	if op == nil {
		return &homeLinkResp{homeStatus: notHomeHere}, nil
	}
	defer op.end()
	if err := op.allow(r.Caller, acl.Write|acl.Execute); err != nil {
		return nil, err
	}
	// The new name must be free: checked here, and again by the commit
	// batch's precondition.
	if _, err := h.st.GetEntry(ctx, ndir, nname); err == nil {
		return nil, fmt.Errorf("%s: %w", r.New, fs.ErrExist)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	// The old name: its home and its inode (a stub's is its record's,
	// with the stub's anchor), as a stat reads them. Its version or its
	// record's count is what the transaction's parts check.
	src, err := h.r.locate(ctx, r.Old, true)
	if err != nil {
		return nil, h.r.missing(ctx, r.Caller, r.Old, err)
	}
	in := src.inode
	if err := allowInode(r.Caller, r.Old, in); err != nil {
		return nil, err
	}
	switch {
	case in.Type == rpc.TypeDir:
		return nil, fmt.Errorf("%s: %w: a directory cannot be linked", r.Old, fs.ErrPermission)
	case in.ID == 0:
		return nil, fmt.Errorf("%s: %w: the inode has no id yet (the shard numbers inodes made before ids in the background)", r.Old, rpc.ErrUnavailable)
	}
	now := time.Now().UnixNano()
	plan := h.newPlan(op.txn)
	ref := &stubRef{Anchor: src.anchor, ID: in.ID}
	if ref.Anchor == "" {
		// Its first extra name: the inode becomes a record where it is.
		ref.Anchor = src.shard
		plan.add(src.shard, h.id, []string{r.Old, ref.record()}, txnOp{Kind: opLinkFirst, Path: r.Old, ID: in.ID, Ctime: now})
	} else {
		linkCount(plan, h.id, ref, 1)
	}
	// The new name's stub, placed like a new file of its directory.
	chain := wireCodes(store.ChildAncestors(store.PathDepth(ndir), &op.dino))
	stub := rpc.Inode{Type: in.Type, Target: in.Target, Rdev: in.Rdev, ID: in.ID, Ancestors: chain}
	home := h.placeChild(ctx, ndir, false)
	if home == "" {
		home = h.id
	}
	if home != h.id {
		plan.add(home, h.id, []string{r.New}, txnOp{Kind: opPutInode, Path: r.New, Inode: &stub, Anchor: ref.Anchor})
	}
	ent := store.Entry{Name: nname, Type: storeType(in.Type), Home: home, ID: in.ID}
	newPath, anchor := r.New, ref.Anchor
	plan.local = func(b *store.Batch) {
		b.RequireInodeExists(ndir)
		b.RequireEntryAbsent(ndir, nname)
		b.PutEntry(ndir, ent)
		if home == h.id {
			si := storeInode(&stub)
			si.Anchor = anchor
			b.RequireInodeAbsent(newPath)
			b.PutInode(newPath, si)
		}
	}
	if _, err := h.runTxn(ctx, plan); err != nil {
		return nil, fmt.Errorf("link %s to %s: %w", r.New, r.Old, err)
	}
	if home == h.id {
		h.touch(r.New)
	}
	out := *withoutText(*in)
	out.Path, out.Home, out.Ancestors, out.Anchor = r.New, home, chain, ref.Anchor
	out.Nlink++
	out.Ctime = now
	return &homeLinkResp{Inode: out}, nil
}

// recordOf reads the record a stub names, at its anchor's leader (this
// node or an RPC), as localCheck reads a path; ok is false when it is
// gone (its last name was removed after the stub was read).
func (h *home) recordOf(ctx context.Context, stub *store.Inode) (rec rpc.Inode, ok bool, err error) {
	ref := stubRef{Anchor: stub.Anchor, ID: stub.ID}
	resp, err := callShard(ctx, h.r, ref.Anchor, methodLocalCheck, &localCheckReq{Path: ref.record(), WithInode: true}, (*home).localCheck)
	if err != nil {
		return rpc.Inode{}, false, fmt.Errorf("the record of inode %d at shard %s: %w", stub.ID, ref.Anchor, err)
	}
	if !resp.Exists || resp.Inode == nil {
		return rpc.Inode{}, false, nil
	}
	return *resp.Inode, true, nil
}

// setAttrLinked changes the attributes of path p, a stub: the caller's
// search permission along p is checked here (the stub has p's ancestor
// codes, the record none), the rest at the record's anchor.
func (h *home) setAttrLinked(ctx context.Context, req *homeSetAttrReq, p string, stub *store.Inode) (*homeSetAttrResp, error) {
	if !unrestricted(req.Caller) {
		if err := allowAncestors(req.Caller, p, stub.Ancestors); err != nil {
			return nil, err
		}
	}
	fwd := *req
	fwd.shardReq = shardReq{}
	fwd.Req.Path = store.LinkRecordPath(stub.ID)
	resp, err := callShard(ctx, h.r, stub.Anchor, methodHomeSetAttr, &fwd, (*home).setAttrHere)
	if err != nil {
		return nil, err
	}
	if resp.NotHome {
		return nil, notExist(p) // its last other name went meanwhile, and this one with it
	}
	resp.Inode.Path, resp.Inode.Home, resp.Inode.Ancestors, resp.Inode.Anchor = p, h.id, wireCodes(stub.Ancestors), stub.Anchor
	h.touch(p)
	return resp, nil
}

// checkLinkOp checks a link_first or link_count op at prepare; busy means
// the state is not what the coordinator saw.
func (h *home) checkLinkOp(ctx context.Context, op *txnOp) (busy bool, err error) {
	if !h.writesFormat(store.BatchFormatV7) {
		return false, fmt.Errorf("%s: %w: a replica of shard %s runs a build without hard links", op.Path, errors.ErrUnsupported, h.id)
	}
	ino, err := h.st.GetInode(ctx, op.Path)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil // removed since the coordinator looked
	} else if err != nil {
		return false, err
	}
	if op.Kind == opLinkCount {
		if !store.IsLinkRecord(op.Path) {
			return false, fmt.Errorf("%w: link_count of %q", rpc.ErrBadRequest, op.Path)
		}
		if op.Delta > 0 && uint64(ino.Nlink)+uint64(op.Delta) > maxLinks {
			return false, fmt.Errorf("%w: inode %d has %d names (at most %d)", fs.ErrInvalid, ino.ID, ino.Nlink, maxLinks)
		}
		return false, nil
	}
	switch {
	case ino.Type == store.TypeDir:
		return false, fmt.Errorf("%s: %w: a directory cannot be linked", op.Path, fs.ErrPermission)
	case ino.ID != op.ID, ino.Anchor != "":
		return true, nil // another inode now, or linked meanwhile
	}
	if _, err := h.st.GetInode(ctx, store.LinkRecordPath(ino.ID)); err == nil {
		return false, fmt.Errorf("%w: the record of inode %d exists at %s without a stub", store.ErrCorrupt, ino.ID, h.id)
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	return false, nil
}

// maxLinks bounds the names of one inode (ext4's EXT4_LINK_MAX).
const maxLinks = 65000

// applyLinkOp adds a committed link_first or link_count op to b (op i of
// part txn): a first extra name turns the inode into its record, with one
// more name, and a stub; a count change rewrites the record, or at zero
// deletes it and sends its contents to the trash.
func (h *home) applyLinkOp(ctx context.Context, b *store.Batch, txn string, i int, op *txnOp) error {
	ino, err := h.st.GetInode(ctx, op.Path)
	if errors.Is(err, store.ErrNotFound) {
		h.log.Error("commit: linked inode missing", "txn", txn, "op", op.Kind, "path", op.Path)
		return nil
	} else if err != nil {
		return err
	}
	b.RequireInodeVersion(op.Path, ino.Version)
	if op.Kind == opLinkFirst {
		rec := ino
		rec.Nlink = max(ino.Nlink, 1) + 1
		rec.Ancestors = nil // the names' codes are their stubs'
		rec.Ctime = op.Ctime
		rec.Version++
		stub := store.Inode{Type: ino.Type, Target: ino.Target, Rdev: ino.Rdev, ID: ino.ID,
			Ancestors: ino.Ancestors, Version: ino.Version + 1, Anchor: h.id}
		rp := store.LinkRecordPath(ino.ID)
		b.RequireInodeAbsent(rp)
		b.PutInode(rp, rec)
		b.PutInode(op.Path, stub)
		return nil
	}
	if n := int64(ino.Nlink) + int64(op.Delta); n > 0 {
		ino.Nlink = uint32(n)
		ino.Ctime = op.Ctime
		ino.Version++
		b.PutInode(op.Path, ino)
		return nil
	}
	trashChange(b, fmt.Sprintf("%s/%d", txn, i), op.Path, &ino, nil)
	b.DeleteInode(op.Path)
	return nil
}

// removeLinked removes path r.Path, a stub homed here (this node is also
// its parent's home, under op): the entry and the stub go in the commit
// batch, and the record's count drops at its anchor.
func (h *home) removeLinked(ctx context.Context, r *homeRemoveReq, op *parentOp, stub *store.Inode, owner *uint32) (*homeRemoveResp, error) {
	p := r.Path
	dir, name := splitPath(p)
	if owner != nil {
		if err := h.linkedOwner(ctx, p, owner); err != nil {
			return nil, err
		}
	}
	plan := h.newPlan(op.txn)
	linkCount(plan, h.id, &stubRef{Anchor: stub.Anchor, ID: stub.ID}, -1)
	version := stub.Version
	plan.local = func(b *store.Batch) {
		b.RequireEntryExists(dir, name)
		b.RequireInodeVersion(p, version)
		b.DeleteEntry(dir, name)
		b.DeleteInode(p)
	}
	plan.async = true
	if _, err := h.runTxn(ctx, plan); err != nil {
		return nil, fmt.Errorf("remove %s: %w", p, err)
	}
	return &homeRemoveResp{Hops: 2}, nil
}

// linkedOwner checks, for a removal or a rename out of a sticky
// directory, that the inode path p names (one of several names) has owner
// owner, as its record says.
func (h *home) linkedOwner(ctx context.Context, p string, owner *uint32) error {
	l, err := h.r.locate(ctx, p, true)
	if err != nil {
		return err
	}
	ino := storeInode(l.inode)
	return checkOwner(p, &ino, owner)
}
