package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/ghba/ghba/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// BatchCreate creates several entries of one directory (rpc.BatchCreateRequest):
// the request goes to the directory's home, which checks the directory
// and the caller's permission once, applies every child it places on its
// own shard in one log entry, and creates the others one by one as Create
// does.
func (n *Namespace) BatchCreate(ctx context.Context, r *rpc.BatchCreateRequest) (*rpc.BatchCreateResponse, error) {
	dir, err := CleanPath(r.Dir)
	if err != nil {
		return nil, err
	}
	if len(r.Entries) > rpc.MaxBatchCreate {
		return nil, fmt.Errorf("%w: %d entries in one batch (limit %d)", fs.ErrInvalid, len(r.Entries), rpc.MaxBatchCreate)
	}
	req := &homeBatchCreateReq{Dir: dir, Entries: make([]homeCreateReq, len(r.Entries)), Caller: caller(ctx)}
	seen := make(map[string]bool, len(r.Entries))
	for i, e := range r.Entries {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
			return nil, fmt.Errorf("%w: entry name %q", rpc.ErrInvalidPath, e.Name)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("%w: entry %q named twice", fs.ErrInvalid, e.Name)
		}
		seen[e.Name] = true
		c := homeCreateReq{Path: path.Join(dir, e.Name), Type: e.Type, Mode: e.Mode, UID: e.UID, GID: e.GID,
			Size: e.Size, Atime: e.Atime, Mtime: e.Mtime, Target: e.Symlink}
		if c.Type == rpc.TypeSymlink {
			c.Size = int64(len(c.Target))
		}
		if _, err := CleanPath(c.Path); err != nil {
			return nil, err
		}
		if storeType(c.Type) == 0 {
			return nil, fmt.Errorf("%w: entry %q: type %q", fs.ErrInvalid, e.Name, e.Type)
		}
		if err := checkCreate(&c); err != nil {
			return nil, fmt.Errorf("entry %q: %w", e.Name, err)
		}
		req.Entries[i] = c
	}
	if len(req.Entries) == 0 {
		return &rpc.BatchCreateResponse{Results: []rpc.BatchCreateResult{}}, nil
	}
	resp, hops, err := atHome(ctx, n, target{path: dir, child: req.Entries[0].Path, dir: true, checked: true}, methodHomeBatchCreate, req, (*home).coordBatchCreate)
	if err != nil {
		return nil, err
	}
	return &rpc.BatchCreateResponse{Results: resp.Results, Hops: hops + resp.Hops}, nil
}

func (h *home) handleHomeBatchCreate(ctx context.Context, r *homeBatchCreateReq) (*homeBatchCreateResp, error) {
	dir, err := CleanPath(r.Dir)
	if err != nil || len(r.Entries) == 0 || len(r.Entries) > rpc.MaxBatchCreate {
		return nil, fmt.Errorf("%w: bad batch create request", rpc.ErrBadRequest)
	}
	for i := range r.Entries {
		e := &r.Entries[i]
		p, err := CleanPath(e.Path)
		if err != nil || p == "/" || path.Dir(p) != dir || storeType(e.Type) == 0 || checkCreate(e) != nil {
			return nil, fmt.Errorf("%w: bad batch create request", rpc.ErrBadRequest)
		}
		e.Path, e.Caller = p, r.Caller
	}
	r.Dir = dir
	return h.coordBatchCreate(ctx, r)
}

// coordBatchCreate creates r's entries at their directory's home (this
// node).
func (h *home) coordBatchCreate(ctx context.Context, r *homeBatchCreateReq) (*homeBatchCreateResp, error) {
	return retryBusy(ctx, h, func() (*homeBatchCreateResp, error) { return h.coordBatchCreateOnce(ctx, r) })
}

func (h *home) coordBatchCreateOnce(ctx context.Context, r *homeBatchCreateReq) (*homeBatchCreateResp, error) {
	paths := make([]string, len(r.Entries))
	for i := range r.Entries {
		paths[i] = r.Entries[i].Path
	}
	op, err := h.beginParentOp(ctx, r.Dir, r.Dir, paths, []string{r.Dir}, paths, nil)
	if err != nil {
		return nil, err
	}
	if op == nil {
		return &homeBatchCreateResp{homeStatus: notHomeHere}, nil
	}
	defer op.end()
	if err := op.allow(r.Caller, acl.Write|acl.Execute); err != nil {
		return nil, err
	}
	resp := &homeBatchCreateResp{Results: make([]rpc.BatchCreateResult, len(r.Entries))}
	var (
		b      store.Batch
		local  []int
		inodes = make([]rpc.Inode, len(r.Entries))
		away   []int
	)
	b.RequireInodeExists(r.Dir)
	for i := range r.Entries {
		e := &r.Entries[i]
		_, name := splitPath(e.Path)
		if _, err := h.st.GetEntry(ctx, r.Dir, name); err == nil {
			resp.Results[i] = batchCreateError(fmt.Errorf("%s: %w", e.Path, fs.ErrExist))
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if home := h.placeChild(ctx, r.Dir, e.Type == rpc.TypeDir); home != h.id {
			away = append(away, i) // placed again by createPlaced
			continue
		}
		inodes[i] = newInode(e, h.id, &op.dino)
		addLocalCreate(&b, &inodes[i])
		local = append(local, i)
	}
	if len(local) > 0 {
		if err := h.apply(ctx, &b); err != nil {
			return nil, fmt.Errorf("create in %s: %w", r.Dir, storeErr(err))
		}
		for _, i := range local {
			h.touch(inodes[i].Path)
			resp.Results[i] = rpc.BatchCreateResult{Inode: &inodes[i]}
		}
	}
	for _, i := range away {
		op.txn = h.newTxnID()
		cr, err := h.createPlaced(ctx, &r.Entries[i], op)
		if err != nil {
			resp.Results[i] = batchCreateError(err)
			continue
		}
		resp.Hops += cr.Hops
		resp.Results[i] = rpc.BatchCreateResult{Inode: &cr.Inode}
	}
	return resp, nil
}

func batchCreateError(err error) rpc.BatchCreateResult {
	return rpc.BatchCreateResult{Code: rpc.ErrorCode(err), Message: err.Error()}
}
