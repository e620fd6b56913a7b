package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/internal/tasks"
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
	req, err := newBatchCreateReq(ctx, r)
	if err != nil {
		return nil, err
	}
	if len(req.Entries) > rpc.MaxBatchCreate {
		return nil, fmt.Errorf("%w: %d entries in one batch (limit %d)", fs.ErrInvalid, len(req.Entries), rpc.MaxBatchCreate)
	}
	if len(req.Entries) == 0 {
		return &rpc.BatchCreateResponse{Results: []rpc.BatchCreateResult{}}, nil
	}
	resp, hops, err := n.batchCreateAt(ctx, req)
	if err != nil {
		return nil, err
	}
	out := &rpc.BatchCreateResponse{Results: resp.Results, Hops: hops}
	out.HomeAddrs = n.homeAddrs(out.HomeAddrs, resp.Results)
	return out, nil
}

// batchCreateAt runs req at its directory's home, found the verified way
// when the shard that seems to home it does not.
func (n *Namespace) batchCreateAt(ctx context.Context, req *homeBatchCreateReq) (*homeBatchCreateResp, int, error) {
	resp, hops, err := atHome(ctx, n, target{path: req.Dir, child: req.Entries[0].Path, dir: true, checked: true}, methodHomeBatchCreate, req, (*home).coordBatchCreate)
	if err != nil {
		return nil, hops, err
	}
	return resp, hops + resp.Hops, nil
}

// newBatchCreateReq checks r and turns it into the request its directory's
// home serves.
func newBatchCreateReq(ctx context.Context, r *rpc.BatchCreateRequest) (*homeBatchCreateReq, error) {
	dir, err := CleanPath(r.Dir)
	if err != nil {
		return nil, err
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
			Size: e.Size, Atime: e.Atime, Mtime: e.Mtime, Target: e.Symlink, Rdev: e.Rdev, Text: e.Text, Xattrs: e.Xattrs, AsGiven: true}
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
		if err := checkXattrsBy(req.Caller, c.Path, c.Xattrs); err != nil {
			return nil, err
		}
		req.Entries[i] = c
	}
	return req, nil
}

// homeAddrs adds to m (made if nil) the RPC address of each shard homing
// an inode of results, where this node knows it.
func (n *Namespace) homeAddrs(m map[string]string, results []rpc.BatchCreateResult) map[string]string {
	for _, r := range results {
		if r.Inode == nil || m[r.Inode.Home] != "" {
			continue
		}
		if a := n.addrOfShard(r.Inode.Home); a != "" {
			if m == nil {
				m = make(map[string]string)
			}
			m[r.Inode.Home] = a
		}
	}
	return m
}

// BatchCreateDirs creates the entries of several directories
// (rpc.BatchCreateDirsRequest). The directories are grouped by the shard
// that seems to home them, and each group is created at that shard's
// leader in one step (coordBatchCreateDirs); a directory that no led shard
// seems to home, or that its group's shard turned out not to home, is
// created as BatchCreate creates it.
func (n *Namespace) BatchCreateDirs(ctx context.Context, r *rpc.BatchCreateDirsRequest) (*rpc.BatchCreateDirsResponse, error) {
	total := 0
	for i := range r.Dirs {
		if total += len(r.Dirs[i].Entries); total > rpc.MaxBatchCreate {
			return nil, fmt.Errorf("%w: more than %d entries in one batch", fs.ErrInvalid, rpc.MaxBatchCreate)
		}
	}
	out := &rpc.BatchCreateDirsResponse{Dirs: make([]rpc.BatchCreateDirResult, len(r.Dirs))}
	// A directory whose request is bad (a bad name, a name twice) fails
	// alone, with the error BatchCreate would give it.
	reqs := make([]homeBatchCreateReq, len(r.Dirs))
	bad := make([]bool, len(r.Dirs))
	for i := range r.Dirs {
		req, err := newBatchCreateReq(ctx, &r.Dirs[i])
		if err != nil {
			out.Dirs[i] = rpc.BatchCreateDirResult{Code: rpc.ErrorCode(err), Message: err.Error()}
			bad[i] = true
			continue
		}
		reqs[i] = *req
	}
	if err := checkDistinct(reqs); err != nil {
		return nil, err
	}
	groups := make(map[string][]int)
	var alone []int
	for i, req := range reqs {
		switch s := n.candidate(req.Dir); {
		case bad[i]:
		case len(req.Entries) == 0:
			out.Dirs[i].Results = []rpc.BatchCreateResult{}
		case s == "":
			alone = append(alone, i)
		default:
			groups[s] = append(groups[s], i)
		}
	}
	hops := make([]int, len(reqs))
	for s, idx := range groups {
		req := &homeBatchCreateDirsReq{Dirs: make([]homeBatchCreateReq, len(idx)), Caller: caller(ctx)}
		for j, i := range idx {
			req.Dirs[j] = reqs[i]
		}
		resp, err := callShardOnce(ctx, n, s, methodHomeBatchCreateDirs, req, (*home).coordBatchCreateDirs)
		hops[idx[0]] += n.hop(s)
		if err == nil && len(resp.Dirs) != len(idx) {
			err = fmt.Errorf("%w: %d results for %d directories", rpc.ErrProtocol, len(resp.Dirs), len(idx))
		}
		switch {
		case err == nil:
			hops[idx[0]] += resp.Hops
			for j, i := range idx {
				d := &resp.Dirs[j]
				if d.NotHome || refusal(d.Code.Err(d.Message)) {
					// A wrong candidate, or a refusal read from the store of
					// a leader that may have been deposed: the verified way.
					alone = append(alone, i)
					continue
				}
				out.Dirs[i] = rpc.BatchCreateDirResult{Results: d.Results, Code: d.Code, Message: d.Message}
			}
		case retryable(err) || refusal(err):
			alone = append(alone, idx...)
		default:
			return nil, err
		}
	}
	tasks.ForEach(len(alone), batchParallel, func(j int) {
		i := alone[j]
		resp, h, err := n.batchCreateAt(ctx, &reqs[i])
		hops[i] += h
		if err != nil {
			out.Dirs[i] = rpc.BatchCreateDirResult{Code: rpc.ErrorCode(err), Message: err.Error()}
			return
		}
		out.Dirs[i] = rpc.BatchCreateDirResult{Results: resp.Results}
	})
	for i := range out.Dirs {
		out.Hops += hops[i]
		out.HomeAddrs = n.homeAddrs(out.HomeAddrs, out.Dirs[i].Results)
	}
	return out, nil
}

func (h *home) handleHomeBatchCreate(ctx context.Context, r *homeBatchCreateReq) (*homeBatchCreateResp, error) {
	if err := checkHomeBatch(r, r.Caller); err != nil {
		return nil, err
	}
	return h.coordBatchCreate(ctx, r)
}

func (h *home) handleHomeBatchCreateDirs(ctx context.Context, r *homeBatchCreateDirsReq) (*homeBatchCreateDirsResp, error) {
	total := 0
	for i := range r.Dirs {
		if err := checkHomeBatch(&r.Dirs[i], r.Caller); err != nil {
			return nil, err
		}
		total += len(r.Dirs[i].Entries)
	}
	if len(r.Dirs) == 0 || total > rpc.MaxBatchCreate || checkDistinct(r.Dirs) != nil {
		return nil, fmt.Errorf("%w: bad batch create request", rpc.ErrBadRequest)
	}
	return h.coordBatchCreateDirs(ctx, r)
}

// checkDistinct refuses a path that dirs name twice (a directory may come
// more than once: a large one in parts).
func checkDistinct(dirs []homeBatchCreateReq) error {
	seen := make(map[string]bool)
	for _, d := range dirs {
		for i := range d.Entries {
			p := d.Entries[i].Path
			if seen[p] {
				return fmt.Errorf("%w: entry %s named twice", fs.ErrInvalid, p)
			}
			seen[p] = true
		}
	}
	return nil
}

// checkHomeBatch checks a batch create that a node forwarded, and sets
// its caller.
func checkHomeBatch(r *homeBatchCreateReq, caller *acl.Identity) error {
	dir, err := CleanPath(r.Dir)
	if err != nil || len(r.Entries) == 0 || len(r.Entries) > rpc.MaxBatchCreate {
		return fmt.Errorf("%w: bad batch create request", rpc.ErrBadRequest)
	}
	for i := range r.Entries {
		e := &r.Entries[i]
		p, err := CleanPath(e.Path)
		if err != nil || p == "/" || path.Dir(p) != dir || storeType(e.Type) == 0 || checkCreate(e) != nil {
			return fmt.Errorf("%w: bad batch create request", rpc.ErrBadRequest)
		}
		e.Path, e.Caller = p, caller
	}
	r.Dir, r.Caller = dir, caller
	return nil
}

// coordBatchCreate creates r's entries at their directory's home (this
// node).
func (h *home) coordBatchCreate(ctx context.Context, r *homeBatchCreateReq) (*homeBatchCreateResp, error) {
	return retryBusy(ctx, h, func() (*homeBatchCreateResp, error) {
		bs, hops, err := h.createInDirs(ctx, []homeBatchCreateReq{*r})
		switch {
		case err != nil:
			return nil, err
		case bs[0].notHome:
			return &homeBatchCreateResp{homeStatus: notHomeHere}, nil
		case bs[0].err != nil:
			return nil, bs[0].err
		}
		return &homeBatchCreateResp{Results: bs[0].results, Hops: hops}, nil
	})
}

// coordBatchCreateDirs creates the entries of r's directories at their
// home (this node), together.
func (h *home) coordBatchCreateDirs(ctx context.Context, r *homeBatchCreateDirsReq) (*homeBatchCreateDirsResp, error) {
	return retryBusy(ctx, h, func() (*homeBatchCreateDirsResp, error) {
		bs, hops, err := h.createInDirs(ctx, r.Dirs)
		if err != nil {
			return nil, err
		}
		out := &homeBatchCreateDirsResp{Dirs: make([]homeDirResult, len(bs)), Hops: hops}
		for i, b := range bs {
			d := &out.Dirs[i]
			switch {
			case b.notHome:
				d.homeStatus = notHomeHere
			case b.err != nil:
				d.Code, d.Message = rpc.ErrorCode(b.err), b.err.Error()
			default:
				d.Results = b.results
			}
		}
		return out, nil
	})
}

// checkSpecialFormat refuses a batch with a special file while the
// shard's log cannot carry one (batch format 3).
func (h *home) checkSpecialFormat(dirs []homeBatchCreateReq) error {
	for _, d := range dirs {
		for _, e := range d.Entries {
			if rpc.SpecialType(e.Type) {
				return h.specialFormat(e.Type)
			}
		}
	}
	return nil
}

// dirBatch is one directory's share of createInDirs.
type dirBatch struct {
	req  *homeBatchCreateReq
	dino store.Inode // the directory's inode, read under the locks
	// notHome: the directory is not homed here; err: the directory's
	// error (not a directory, no permission). Neither: results.
	notHome bool
	err     error
	results []rpc.BatchCreateResult
	inodes  []rpc.Inode
	// local and away index the entries placed here and elsewhere.
	local, away []int
}

// dirBatches are the directories of one createInDirs.
type dirBatches []dirBatch

// createInDirs creates the entries of dirs, directories homed here, as one
// operation: it takes the locks of every new path, registers them, checks
// each directory and the callers' permission once, places every child,
// and creates them all in one transaction: one log entry here, and one
// part for each other shard that a child is placed on. If such a shard
// does not answer, the children homed here are created in one step and
// the others placed again one by one, as Create does. An error concerns
// every directory (the results say nothing then).
func (h *home) createInDirs(ctx context.Context, dirs []homeBatchCreateReq) (_ []dirBatch, hops int, _ error) {
	if err := h.checkSpecialFormat(dirs); err != nil {
		return nil, 0, err
	}
	txn, end, err := h.beginBatchOp(ctx, dirs)
	if err != nil {
		return nil, 0, err
	}
	defer end()
	bs := make(dirBatches, len(dirs))
	for i := range dirs {
		b := &bs[i]
		b.req = &dirs[i]
		if err := h.placeDir(ctx, b); err != nil {
			return nil, 0, err
		}
	}
	if bs.anyAway() {
		created, hops, err := h.createBatchTxn(ctx, txn, dirs, bs)
		switch {
		case err != nil:
			return nil, 0, err
		case created:
			return bs, hops, nil
		}
	}
	if bs.anyLocal() {
		var sb store.Batch
		bs.addLocal(&sb)
		if err := h.apply(ctx, &sb); err != nil {
			return nil, 0, fmt.Errorf("create in %s: %w", dirsName(dirs), storeErr(err))
		}
		h.touchLocal(bs)
	}
	return bs, h.createAwayEach(ctx, bs), nil
}

// beginBatchOp takes the locks of the new paths of dirs and registers
// them, under a new transaction id; the caller calls end.
func (h *home) beginBatchOp(ctx context.Context, dirs []homeBatchCreateReq) (txn string, end func(), _ error) {
	var names, parents []string
	for i := range dirs {
		parents = append(parents, dirs[i].Dir)
		for j := range dirs[i].Entries {
			names = append(names, dirs[i].Entries[j].Path)
		}
	}
	keys := make([]string, len(names))
	for i, p := range names {
		keys[i] = "e:" + p
	}
	unlock, err := h.locks.lock(ctx, keys...)
	if err != nil {
		return "", nil, err
	}
	txn = h.newTxnID()
	reg, err := h.beginOp(ctx, txn, parents, names, nil)
	if err != nil {
		unlock()
		return "", nil, err
	}
	return txn, func() {
		h.endOp(reg)
		unlock()
	}, nil
}

// anyAway reports whether a child of bs is placed on another shard.
func (bs dirBatches) anyAway() bool {
	return slices.ContainsFunc(bs, func(b dirBatch) bool { return len(b.away) > 0 })
}

// anyLocal reports whether a child of bs is placed here.
func (bs dirBatches) anyLocal() bool {
	return slices.ContainsFunc(bs, func(b dirBatch) bool { return len(b.local) > 0 })
}

// awayDir reports whether a child of bs placed on another shard is a
// directory.
func (bs dirBatches) awayDir() bool {
	return slices.ContainsFunc(bs, func(b dirBatch) bool {
		return slices.ContainsFunc(b.away, func(i int) bool { return b.inodes[i].Type == rpc.TypeDir })
	})
}

// done records the children idx of b as created.
func (b *dirBatch) done(idx []int) {
	for _, i := range idx {
		b.results[i] = rpc.BatchCreateResult{Inode: withoutText(b.inodes[i])}
	}
}

// addLocal adds the checks of the directories and the creates of the
// children placed here.
func (bs dirBatches) addLocal(sb *store.Batch) {
	for i := range bs {
		if b := &bs[i]; b.results != nil && len(b.local)+len(b.away) > 0 {
			sb.RequireInodeExists(b.req.Dir)
			for _, i := range b.local {
				addLocalCreate(sb, &b.inodes[i])
			}
		}
	}
}

// touchLocal updates the filters for the children placed here, once they
// are created, and records them as created.
func (h *home) touchLocal(bs dirBatches) {
	for i := range bs {
		for _, j := range bs[i].local {
			h.touch(bs[i].inodes[j].Path)
		}
		bs[i].done(bs[i].local)
	}
}

// createBatchTxn creates every child of bs in one transaction txn: the
// entries and local inodes here, each other shard's inodes in its part.
// It reports created with the hops; or, when a shard did not answer and
// the transaction was aborted, neither created nor an error (the caller
// creates the children one by one).
func (h *home) createBatchTxn(ctx context.Context, txn string, dirs []homeBatchCreateReq, bs dirBatches) (created bool, hops int, _ error) {
	plan := h.newPlan(txn)
	for i := range bs {
		for _, j := range bs[i].away {
			in := &bs[i].inodes[j]
			plan.add(in.Home, h.id, []string{in.Path}, txnOp{Kind: opPutInode, Path: in.Path, Inode: in})
		}
	}
	plan.local = func(sb *store.Batch) {
		bs.addLocal(sb)
		for i := range bs {
			for _, j := range bs[i].away {
				in := &bs[i].inodes[j]
				dir, name := splitPath(in.Path)
				sb.RequireEntryAbsent(dir, name)
				sb.PutEntry(dir, store.Entry{Name: name, Type: storeType(in.Type), Home: in.Home, ID: in.ID})
			}
		}
	}
	// Directories homed elsewhere: wait for their homes to apply them
	// (see createAt).
	plan.async = true
	if bs.awayDir() {
		plan.wait = h.r.tune.DeliverWait
	}
	_, err := h.runTxn(ctx, plan)
	var pu *prepareUnreachable
	switch {
	case err == nil:
		h.touchLocal(bs)
		for i := range bs {
			bs[i].done(bs[i].away)
		}
		return true, 2 * len(plan.parts), nil
	case !errors.As(err, &pu) || ctx.Err() != nil:
		return false, 0, fmt.Errorf("create in %s: %w", dirsName(dirs), err)
	}
	// A shard did not answer and the transaction was aborted: create
	// what is homed here in one step and place the rest one by one.
	h.log.Debug("batch create: a child's home did not answer; creating one by one", "dir", dirsName(dirs), "home", pu.node, "err", err)
	return false, 0, nil
}

// createAwayEach creates the children of bs placed on other shards one by
// one, as Create does, recording each one's result; it returns the hops.
func (h *home) createAwayEach(ctx context.Context, bs dirBatches) (hops int) {
	for i := range bs {
		b := &bs[i]
		op := &parentOp{h: h, dir: b.req.Dir, dino: b.dino}
		for _, j := range b.away {
			op.txn = h.newTxnID()
			cr, err := h.createPlaced(ctx, &b.req.Entries[j], op)
			if err != nil {
				b.results[j] = batchCreateError(err)
				continue
			}
			hops += cr.Hops
			b.results[j] = rpc.BatchCreateResult{Inode: &cr.Inode}
		}
	}
	return hops
}

// placeDir checks b's directory (homed here, a directory, writable by the
// caller) and places each of its new children; an error concerns every
// directory of the operation.
func (h *home) placeDir(ctx context.Context, b *dirBatch) error {
	r := b.req
	dino, err := h.st.GetInode(ctx, r.Dir)
	switch {
	case errors.Is(err, store.ErrNotFound):
		b.notHome = true
		return nil
	case err != nil:
		return err
	case dino.Type != store.TypeDir:
		b.err = fmt.Errorf("%s: %s: %w", r.Entries[0].Path, r.Dir, rpc.ErrNotDir)
		return nil
	}
	b.dino = dino
	if b.err = allowDir(r.Caller, r.Dir, &b.dino, acl.Write|acl.Execute); b.err != nil {
		return nil
	}
	names := make([]string, len(r.Entries))
	for i := range r.Entries {
		_, names[i] = splitPath(r.Entries[i].Path)
	}
	exist, err := h.st.EntriesExist(ctx, r.Dir, names)
	if err != nil {
		return err
	}
	b.results = make([]rpc.BatchCreateResult, len(r.Entries))
	b.inodes = make([]rpc.Inode, len(r.Entries))
	fresh := 0
	for i := range exist {
		if !exist[i] {
			fresh++
		}
	}
	ids, err := h.newIDs(ctx, fresh)
	if err != nil {
		return err
	}
	for i := range r.Entries {
		e := &r.Entries[i]
		if exist[i] {
			b.results[i] = batchCreateError(fmt.Errorf("%s: %w", e.Path, fs.ErrExist))
			continue
		}
		home := h.placeChild(ctx, r.Dir, e.Type == rpc.TypeDir)
		if home == "" {
			b.results[i] = batchCreateError(fmt.Errorf("%w: no node takes new files", rpc.ErrUnavailable))
			continue
		}
		b.inodes[i] = newInode(e, home, &b.dino, ids[0])
		ids = ids[1:]
		if home == h.id {
			b.local = append(b.local, i)
		} else {
			b.away = append(b.away, i)
		}
	}
	return nil
}

// dirsName names the directories of a batch in errors and logs.
func dirsName(dirs []homeBatchCreateReq) string {
	if len(dirs) == 1 {
		return dirs[0].Dir
	}
	return fmt.Sprintf("%s and %d other directories", dirs[0].Dir, len(dirs)-1)
}

func batchCreateError(err error) rpc.BatchCreateResult {
	return rpc.BatchCreateResult{Code: rpc.ErrorCode(err), Message: err.Error()}
}
