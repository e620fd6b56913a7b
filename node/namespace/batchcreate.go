package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/ghba/ghba/acl"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// BatchCreate creates several entries of one directory (rpc.BatchCreateRequest):
// the request goes to the directory's home, which checks the directory
// and the caller's permission once, places every child, and creates them
// all in one transaction (one log entry when every child is homed with the
// directory). If a chosen shard does not answer, the children homed here
// are created in one step and the others placed again one by one, as
// Create does.
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
			Size: e.Size, Atime: e.Atime, Mtime: e.Mtime, Target: e.Symlink, Text: e.Text}
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
	out := &rpc.BatchCreateResponse{Results: resp.Results, Hops: hops + resp.Hops}
	for _, r := range out.Results {
		if r.Inode == nil || out.HomeAddrs[r.Inode.Home] != "" {
			continue
		}
		if a := n.addrOfShard(r.Inode.Home); a != "" {
			if out.HomeAddrs == nil {
				out.HomeAddrs = make(map[string]string)
			}
			out.HomeAddrs[r.Inode.Home] = a
		}
	}
	return out, nil
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
		inodes      = make([]rpc.Inode, len(r.Entries))
		local, away []int
	)
	names := make([]string, len(r.Entries))
	for i := range r.Entries {
		_, names[i] = splitPath(r.Entries[i].Path)
	}
	exist, err := h.st.EntriesExist(ctx, r.Dir, names)
	if err != nil {
		return nil, err
	}
	for i := range r.Entries {
		e := &r.Entries[i]
		if exist[i] {
			resp.Results[i] = batchCreateError(fmt.Errorf("%s: %w", e.Path, fs.ErrExist))
			continue
		}
		home := h.placeChild(ctx, r.Dir, e.Type == rpc.TypeDir)
		if home == "" {
			resp.Results[i] = batchCreateError(fmt.Errorf("%w: no node takes new files", rpc.ErrUnavailable))
			continue
		}
		inodes[i] = newInode(e, home, &op.dino)
		if home == h.id {
			local = append(local, i)
		} else {
			away = append(away, i)
		}
	}
	done := func(idx []int) {
		for _, i := range idx {
			resp.Results[i] = rpc.BatchCreateResult{Inode: withoutText(inodes[i])}
		}
	}
	if len(away) > 0 {
		// One transaction: the entries and local inodes here, each other
		// shard's inodes in its part.
		plan := h.newPlan(op.txn)
		for _, i := range away {
			p := inodes[i].Path
			plan.add(inodes[i].Home, h.id, []string{p}, txnOp{Kind: opPutInode, Path: p, Inode: &inodes[i]})
		}
		plan.local = func(b *store.Batch) {
			b.RequireInodeExists(r.Dir)
			for _, i := range local {
				addLocalCreate(b, &inodes[i])
			}
			for _, i := range away {
				dir, name := splitPath(inodes[i].Path)
				b.RequireEntryAbsent(dir, name)
				b.PutEntry(dir, store.Entry{Name: name, Type: storeType(inodes[i].Type), Home: inodes[i].Home})
			}
		}
		// Directories homed elsewhere: wait for their homes to apply them
		// (see createAt).
		plan.async = true
		if slices.ContainsFunc(away, func(i int) bool { return inodes[i].Type == rpc.TypeDir }) {
			plan.wait = h.r.tune.DeliverWait
		}
		_, err := h.runTxn(ctx, plan)
		var pu *prepareUnreachable
		switch {
		case err == nil:
			for _, i := range local {
				h.touch(inodes[i].Path)
			}
			done(local)
			done(away)
			resp.Hops += 2 * len(plan.parts)
			return resp, nil
		case !errors.As(err, &pu) || ctx.Err() != nil:
			return nil, fmt.Errorf("create in %s: %w", r.Dir, err)
		}
		// A shard did not answer and the transaction was aborted: create
		// what is homed here in one step and place the rest one by one.
		h.log.Debug("batch create: a child's home did not answer; creating one by one", "dir", r.Dir, "home", pu.node, "err", err)
	}
	if len(local) > 0 {
		var b store.Batch
		b.RequireInodeExists(r.Dir)
		for _, i := range local {
			addLocalCreate(&b, &inodes[i])
		}
		if err := h.apply(ctx, &b); err != nil {
			return nil, fmt.Errorf("create in %s: %w", r.Dir, storeErr(err))
		}
		for _, i := range local {
			h.touch(inodes[i].Path)
		}
		done(local)
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
