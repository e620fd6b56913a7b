package namespace

import (
	"context"
	"errors"
	"fmt"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Reads at a shard's home (docs/design.md, "Leaders, reads and writes").
// Each takes three steps: wait until no transaction in progress at this
// home marks what it reads (inFlight: the transactions' side resolves
// them, participant.go), confirm that this node still leads the shard
// (a linearizable read), then read the store. A read writes nothing.

// localCheck answers whether the shard homes r.Path (once no prepared
// part marks it), and touches it on the LRU list. The answer is linearizable: the
// read happens after a leadership check that began after the request
// arrived.
func (h *home) localCheck(ctx context.Context, r *localCheckReq) (*localCheckResp, error) {
	if err := h.inFlight.settled(ctx, r.Path, false); err != nil {
		return nil, err
	}
	if err := h.rep.VerifyLeader(ctx); err != nil {
		return nil, err
	}
	resp := &localCheckResp{NodeID: h.r.id}
	ino, err := h.st.GetInode(ctx, r.Path)
	if errors.Is(err, store.ErrNotFound) {
		return resp, nil
	} else if err != nil {
		return nil, err
	}
	h.touch(r.Path)
	resp.Exists, resp.Type = true, typeString(ino.Type)
	if !r.WithInode {
		return resp, nil
	}
	if ino.Anchor == "" {
		w := wireInode(r.Path, h.id, &ino)
		resp.Inode = &w
		return resp, nil
	}
	// One name of an inode with several: the record's attributes with
	// this name's path and codes (hardlinks.go).
	rec, ok, err := h.recordOf(ctx, &ino)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &localCheckResp{NodeID: h.r.id}, nil
	}
	rec.Path, rec.Home, rec.Ancestors, rec.Anchor = r.Path, h.id, wireCodes(ino.Ancestors), ino.Anchor
	resp.Inode, resp.Anchor = &rec, ino.Anchor
	return resp, nil
}

func (h *home) handleLocalCheck(ctx context.Context, r *localCheckReq) (*localCheckResp, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	r.Path = p
	return h.localCheck(ctx, r)
}

// entryHere reads entry r.Name of r.Dir in this shard, the directory's
// home (linearizable, as localCheck).
func (h *home) entryHere(ctx context.Context, r *homeEntryReq) (*homeEntryResp, error) {
	if err := h.inFlight.settled(ctx, joinPath(r.Dir, r.Name), false); err != nil {
		return nil, err
	}
	if err := h.rep.VerifyLeader(ctx); err != nil {
		return nil, err
	}
	ino, err := h.st.GetInode(ctx, r.Dir)
	if errors.Is(err, store.ErrNotFound) {
		return &homeEntryResp{homeStatus: notHomeHere}, nil
	} else if err != nil {
		return nil, err
	}
	if ino.Type != store.TypeDir {
		return &homeEntryResp{NotDir: true}, nil
	}
	e, err := h.st.GetEntry(ctx, r.Dir, r.Name)
	if errors.Is(err, store.ErrNotFound) {
		return &homeEntryResp{}, nil
	} else if err != nil {
		return nil, err
	}
	return &homeEntryResp{Exists: true, Entry: wireEntry(e)}, nil
}

func (h *home) handleHomeEntry(ctx context.Context, r *homeEntryReq) (*homeEntryResp, error) {
	dir, err := CleanPath(r.Dir)
	if err != nil {
		return nil, err
	}
	if r.Name == "" || len(r.Name) > MaxNameLen || r.Name == "." || r.Name == ".." || containsSlashOrNUL(r.Name) {
		return nil, fmt.Errorf("%w: bad name %q", rpc.ErrInvalidPath, r.Name)
	}
	r.Dir = dir
	return h.entryHere(ctx, r)
}

func (h *home) handleHomeReadDir(ctx context.Context, r *homeReadDirReq) (*homeReadDirResp, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	r.Path = p
	if r.Limit <= 0 || r.Limit > MaxReadDirLimit {
		r.Limit = DefaultReadDirLimit
	}
	return h.readDirHere(ctx, r)
}

// readDirHere reads a page of a directory homed here.
func (h *home) readDirHere(ctx context.Context, r *homeReadDirReq) (*homeReadDirResp, error) {
	if err := h.inFlight.settled(ctx, r.Path, true); err != nil {
		return nil, err
	}
	ino, err := h.st.GetInode(ctx, r.Path)
	if errors.Is(err, store.ErrNotFound) {
		return &homeReadDirResp{homeStatus: notHomeHere}, nil
	} else if err != nil {
		return nil, err
	}
	if ino.Type != store.TypeDir {
		return nil, fmt.Errorf("%s: %w", r.Path, rpc.ErrNotDir)
	}
	if err := allowDir(r.Caller, r.Path, &ino, acl.Read); err != nil {
		return nil, err
	}
	ents, more, err := h.st.ReadDir(ctx, r.Path, r.After, r.Limit)
	if err != nil {
		return nil, err
	}
	resp := &homeReadDirResp{Entries: make([]rpc.DirEntry, len(ents))}
	for i, e := range ents {
		resp.Entries[i] = wireEntry(e)
	}
	if more && len(ents) > 0 {
		resp.Next = ents[len(ents)-1].Name
	}
	h.touch(r.Path)
	return resp, nil
}
