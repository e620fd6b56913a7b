package namespace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

const (
	// DefaultReadDirLimit is the page size of ReadDir when the request
	// gives none.
	DefaultReadDirLimit = 1000
	// MaxReadDirLimit caps the page size of ReadDir.
	MaxReadDirLimit = 10000
	// MaxBatchStat bounds the paths of one BatchStat request.
	MaxBatchStat = 10000
)

// Stat returns the inode of path, with the level and hops of its lookup.
func (n *Namespace) Stat(ctx context.Context, path string) (*rpc.StatResponse, error) {
	st, _, err := n.stat(ctx, path)
	return st, err
}

// stat is Stat; with fs.ErrNotExist, located.missing and missingIn may
// say whose directory entries said so.
func (n *Namespace) stat(ctx context.Context, path string) (*rpc.StatResponse, located, error) {
	p, err := CleanPath(path)
	if err != nil {
		return nil, located{}, err
	}
	l, err := n.locate(ctx, p, true)
	n.countLookup(l, err)
	id := caller(ctx)
	if err != nil {
		return nil, l, n.missing(ctx, id, p, err)
	}
	if err := allowInode(id, p, l.inode); err != nil {
		return nil, l, err
	}
	return &rpc.StatResponse{Inode: *l.inode, HomeAddr: n.addrOfShard(l.shard), Level: l.level, Hops: l.hops}, l, nil
}

// StatLease is Stat for a client that caches inodes: when this node leads
// the path's shard, the answer carries a lease on the path for the
// client's connection (leases.go).
func (n *Namespace) StatLease(ctx context.Context, path string) (*rpc.StatResponse, error) {
	st, _, err := n.statLease(ctx, path, false)
	return st, err
}

// statLease is StatLease. With absent, a path that does not exist may get
// a lease on its absence, returned with the error: when this node leads
// the shard of the directory whose entries said so (the path's parent, or
// the parent of its first missing ancestor), and the caller is not held
// to permissions (an error for a user depends on the modes along the
// path, which such a lease does not follow).
func (n *Namespace) statLease(ctx context.Context, path string, absent bool) (*rpc.StatResponse, time.Duration, error) {
	peer := rpc.PeerFrom(ctx)
	p, err := CleanPath(path)
	if err != nil || peer == nil || n.leases.ttl <= 0 {
		st, err := n.Stat(ctx, path)
		return st, 0, err
	}
	asked := time.Now()
	epoch := n.leases.epoch(p)
	// The epochs of p's ancestors, nearest first, for a lease on an
	// absence (a write of the missing name or of its directory begun
	// after they were taken refuses it).
	var (
		ancestors [maxAbsenceDepth]uint64
		depth     int
	)
	if absent {
		for q := p; q != "/" && depth < len(ancestors); depth++ {
			q = directParent(q)
			ancestors[depth] = n.leases.epoch(q)
		}
	}
	st, l, err := n.stat(ctx, p)
	if err != nil {
		if !absent || l.missingIn == "" || !errors.Is(err, fs.ErrNotExist) || !unrestricted(caller(ctx)) {
			return nil, 0, err
		}
		h := n.home(l.missingIn)
		if h == nil || !h.led.Before(asked) || h.txns.inFlux(p) || !h.gate.beginGrant() {
			return nil, 0, err
		}
		defer h.gate.endGrant() // (no grant during a planned move: handover.go)
		// The missing name m is p or an ancestor of p; a write of m's
		// entry, or of its directory d, must revoke the lease.
		m := l.missing
		up := strings.Count(p, "/") - strings.Count(m, "/") // m is p's up-th ancestor
		if m == "/" || up < 0 || up >= depth || !isUnder(p, m) {
			return nil, 0, err
		}
		marks := []absenceMark{{dir: directParent(m), epoch: ancestors[up]}}
		if up > 0 {
			marks = append(marks, absenceMark{dir: m, epoch: ancestors[up-1]})
		}
		return nil, n.leases.grantAbsent(peer, p, epoch, marks), err
	}
	// A path in flux (a prepared part of a transaction changes it) gets
	// no lease: the part may be committed and acknowledged before it is
	// applied here. Nor does one read before this node's leadership of its
	// shard began (the read may have been the previous leader's, which may
	// have applied a change since).
	// Nor does one name of an inode with several: a change through
	// another name is made at the record, which revokes no lease on
	// this one (hardlinks.go).
	if h := n.home(st.Inode.Home); l.anchor == "" && h != nil && h.led.Before(asked) && !h.txns.inFlux(p) && h.gate.beginGrant() {
		st.Lease = int64(n.leases.grant(peer, p, epoch))
		h.gate.endGrant() // (no grant during a planned move: handover.go)
	}
	return st, 0, nil
}

// maxAbsenceDepth bounds how many directories above a missing path may
// decide its absence for a lease (deeper: no lease).
const maxAbsenceDepth = 32

// unrestricted reports whether id is not held to permissions: no
// identity (access control off, or a server) or root.
func unrestricted(id *acl.Identity) bool { return id == nil || id.UID == 0 }

// Lookup returns the home of path, with the level and hops that found it.
func (n *Namespace) Lookup(ctx context.Context, path string) (*rpc.LookupResponse, error) {
	p, err := CleanPath(path)
	if err != nil {
		return nil, err
	}
	id := caller(ctx)
	l, err := n.locate(ctx, p, id != nil) // with ACLs on, the inode's codes are checked
	n.countLookup(l, err)
	if err != nil {
		return nil, n.missing(ctx, id, p, err)
	}
	if l.inode != nil {
		if err := allowInode(id, p, l.inode); err != nil {
			return nil, err
		}
	}
	return &rpc.LookupResponse{Path: p, Home: l.shard, Leader: n.leaderOf(l.shard), HomeAddr: n.addrOfShard(l.shard), Type: l.typ, Level: l.level, Hops: l.hops}, nil
}

// batchParallel bounds the parts of one batched request (BatchStat,
// BatchCreateDirs) that a node runs concurrently, each on its own way to
// its home.
const batchParallel = 8

// BatchStat stats several paths (up to MaxBatchStat), concurrently; each
// path's failure is in its result.
// With r.Lease, each answer may carry a cache lease (StatLease). With
// r.Prefetch, the paths after the first that no shard led here holds are
// skipped rather than looked up.
func (n *Namespace) BatchStat(ctx context.Context, r *rpc.BatchStatRequest) (*rpc.BatchStatResponse, error) {
	paths, lease := r.Paths, r.Lease
	if len(paths) > MaxBatchStat {
		return nil, fmt.Errorf("%w: %d paths in one batch (limit %d)", fs.ErrInvalid, len(paths), MaxBatchStat)
	}
	out := &rpc.BatchStatResponse{Results: make([]rpc.BatchStatResult, len(paths))}
	one := func(i int) {
		var (
			st      *rpc.StatResponse
			absence time.Duration
			err     error
		)
		if lease {
			st, absence, err = n.statLease(ctx, paths[i], true)
		} else {
			st, err = n.Stat(ctx, paths[i])
		}
		if err != nil {
			out.Results[i] = rpc.BatchStatError(err)
			out.Results[i].Lease = int64(absence)
			return
		}
		out.Results[i] = rpc.BatchStatResult{Stat: st}
	}
	// A path a shard led here has in its filter is answered from this
	// node's store without an RPC: in this goroutine, one after the other
	// (a goroutine per path would cost more in starting and growing its
	// stack than the lookup itself). The others may need the L1-L4 query
	// path's round trips: those run concurrently, except a prefetch's,
	// which are skipped (the client's guess of their home was wrong, or
	// they do not exist: a lookup would hold up the missed path's answer
	// by a round trip, or a multicast, for a path it may never need) unless
	// the entries of a directory homed here say the path does not exist
	// (the answer then needs no RPC and, with a lease, is cached: programs
	// probe the same missing names again and again).
	var remote []int
	for i, p := range paths {
		switch {
		case n.filtersHere(p):
			one(i)
		case r.Prefetch && i > 0 && lease && n.absentHere(ctx, p):
			one(i)
		case r.Prefetch && i > 0:
			out.Results[i] = rpc.BatchStatResult{Skipped: true}
		default:
			remote = append(remote, i)
		}
	}
	tasks.ForEach(len(remote), batchParallel, func(j int) { one(remote[j]) })
	return out, nil
}

// filtersHere reports whether the filter of a shard this node leads holds
// path (its clean form; Stat then needs no RPC, false positives aside).
func (n *Namespace) filtersHere(path string) bool {
	p, err := CleanPath(path)
	if err != nil || p == "/" {
		return false
	}
	k := routing.HashPath(n.rt.Hash, p)
	for _, h := range n.ledHomes() {
		if _, inLocal := h.testKey(k); inLocal {
			return true
		}
	}
	return false
}

// absentHere reports whether path is missing from the entries of its
// parent directory in a shard this node leads (a read of this node's
// store, not linearizable: a hint that a lookup will need no RPC).
func (n *Namespace) absentHere(ctx context.Context, path string) bool {
	p, err := CleanPath(path)
	if err != nil || p == "/" {
		return false
	}
	dir, name := splitPath(p)
	for _, h := range n.dirHomesHere(dir) {
		ino, err := h.st.GetInode(ctx, dir)
		if err != nil || ino.Type != store.TypeDir {
			continue
		}
		_, err = h.st.GetEntry(ctx, dir, name)
		return errors.Is(err, store.ErrNotFound)
	}
	return false
}

// Create creates a regular file, a symbolic link when r.Symlink is set,
// or the special file r.Type names.
func (n *Namespace) Create(ctx context.Context, r *rpc.CreateRequest) (*rpc.CreateResponse, error) {
	req := &homeCreateReq{Path: r.Path, Type: cmp.Or(r.Type, rpc.TypeFile), Mode: r.Mode, UID: r.UID, GID: r.GID, Layout: r.Layout,
		Size: r.Size, Atime: r.Atime, Mtime: r.Mtime, Text: r.Text, Rdev: r.Rdev, AsGiven: r.AsGiven}
	switch {
	case r.Symlink != "" && req.Type != rpc.TypeFile && req.Type != rpc.TypeSymlink:
		return nil, fmt.Errorf("%w: a %s with a symlink target", fs.ErrInvalid, req.Type)
	case r.Symlink != "":
		req.Type, req.Target, req.Size = rpc.TypeSymlink, r.Symlink, int64(len(r.Symlink))
	case req.Type != rpc.TypeFile && !rpc.SpecialType(req.Type):
		return nil, fmt.Errorf("%w: create makes a file, a symlink or a special file, not a %q", fs.ErrInvalid, req.Type)
	}
	in, hops, err := n.create(ctx, req)
	if err != nil {
		return nil, err
	}
	return &rpc.CreateResponse{Inode: in, HomeAddr: n.addrOfShard(in.Home), Hops: hops}, nil
}

// Mkdir creates a directory (with Parents: and its missing parents,
// succeeding if it already is a directory).
func (n *Namespace) Mkdir(ctx context.Context, r *rpc.MkdirRequest) (*rpc.MkdirResponse, error) {
	var resp *rpc.MkdirResponse
	if r.Parents {
		var err error
		if resp, err = n.mkdirAll(ctx, r); err != nil {
			return nil, err
		}
	} else {
		in, hops, err := n.create(ctx, mkdirReq(r.Path, r))
		if err != nil {
			return nil, err
		}
		resp = &rpc.MkdirResponse{Inode: in, Created: []string{in.Path}, Hops: hops}
	}
	resp.HomeAddr = n.addrOfShard(resp.Inode.Home)
	return resp, nil
}

func (n *Namespace) mkdirAll(ctx context.Context, r *rpc.MkdirRequest) (*rpc.MkdirResponse, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	resp := &rpc.MkdirResponse{}
	// existing returns the directory at q, or an error if q is a file.
	existing := func(q string) (*rpc.Inode, error) {
		l, err := n.locate(ctx, q, true)
		resp.Hops += l.hops
		if err != nil {
			return nil, err
		}
		if err := allowInode(caller(ctx), q, l.inode); err != nil {
			return nil, err
		}
		if l.typ != rpc.TypeDir {
			return nil, fmt.Errorf("%s exists and is not a directory: %w", q, fs.ErrExist)
		}
		return l.inode, nil
	}
	if p == "/" {
		in, err := existing(p)
		if err != nil {
			return nil, err
		}
		resp.Inode = *in
		return resp, nil
	}
	in, hops, err := n.create(ctx, mkdirReq(p, r))
	resp.Hops += hops
	switch {
	case err == nil:
		resp.Inode, resp.Created = in, []string{p}
		return resp, nil
	case errors.Is(err, fs.ErrExist):
		in, err := existing(p)
		if err != nil {
			return nil, err
		}
		resp.Inode = *in
		return resp, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	// A parent is missing: create the chain from the top.
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		q := p[:i]
		req := mkdirReq(q, r)
		if q != p { // a missing parent: created now
			req.Atime, req.Mtime = 0, 0
		}
		in, hops, err := n.create(ctx, req)
		resp.Hops += hops
		switch {
		case err == nil:
			resp.Created = append(resp.Created, q)
			resp.Inode = in
		case errors.Is(err, fs.ErrExist):
			ex, err := existing(q)
			if err != nil {
				if i < len(p) && errors.Is(err, fs.ErrExist) {
					return nil, fmt.Errorf("%s: %w", q, rpc.ErrNotDir)
				}
				return nil, err
			}
			resp.Inode = *ex
		default:
			return nil, err
		}
	}
	return resp, nil
}

// mkdirReq is the create of directory p for r.
func mkdirReq(p string, r *rpc.MkdirRequest) *homeCreateReq {
	return &homeCreateReq{Path: p, Type: rpc.TypeDir, Mode: r.Mode, UID: r.UID, GID: r.GID, Atime: r.Atime, Mtime: r.Mtime, AsGiven: r.AsGiven}
}

// create validates and routes a create to the parent directory's home.
func (n *Namespace) create(ctx context.Context, req *homeCreateReq) (rpc.Inode, int, error) {
	p, err := CleanPath(req.Path)
	if err != nil {
		return rpc.Inode{}, 0, err
	}
	if p == "/" {
		return rpc.Inode{}, 0, fmt.Errorf("/: %w", fs.ErrExist)
	}
	if err := checkCreate(req); err != nil {
		return rpc.Inode{}, 0, err
	}
	req.Path, req.Caller = p, caller(ctx)
	dir, _ := splitPath(p)
	resp, hops, err := atHome(ctx, n, target{path: dir, child: p, dir: true, checked: true}, methodHomeCreate, req, (*home).coordCreate)
	if err != nil {
		return rpc.Inode{}, hops, err
	}
	return resp.Inode, hops + resp.Hops, nil
}

// checkCreate checks what a create asks for beyond its path.
func checkCreate(r *homeCreateReq) error {
	switch {
	case r.Mode&^0o7777 != 0:
		return fmt.Errorf("%w: mode %#o has bits outside 0o7777", fs.ErrInvalid, r.Mode)
	case len(r.Layout) > store.MaxBlobLen:
		return fmt.Errorf("%w: layout of %d bytes (limit %d)", fs.ErrInvalid, len(r.Layout), store.MaxBlobLen)
	case r.Size < 0:
		return fmt.Errorf("%w: size %d", fs.ErrInvalid, r.Size)
	case r.Type == rpc.TypeDir && r.Size != 0:
		return fmt.Errorf("%w: a directory has no size", fs.ErrInvalid)
	case r.Type == rpc.TypeSymlink && (r.Target == "" || len(r.Target) > store.MaxTargetLen):
		return fmt.Errorf("%w: symlink target of %d bytes (1 to %d)", fs.ErrInvalid, len(r.Target), store.MaxTargetLen)
	case r.Type != rpc.TypeSymlink && r.Target != "":
		return fmt.Errorf("%w: a %s has no symlink target", fs.ErrInvalid, r.Type)
	case r.Text != "" && r.Type != rpc.TypeFile:
		return fmt.Errorf("%w: a %s has no text", fs.ErrInvalid, r.Type)
	case r.Rdev != 0 && r.Type != rpc.TypeCharDev && r.Type != rpc.TypeBlockDev:
		return fmt.Errorf("%w: a %s has no device number", fs.ErrInvalid, r.Type)
	case rpc.SpecialType(r.Type) && (r.Size != 0 || len(r.Layout) != 0):
		return fmt.Errorf("%w: a %s has no size and no layout", fs.ErrInvalid, r.Type)
	}
	if len(r.Xattrs) > 0 {
		r.Xattrs = slices.Clone(r.Xattrs)
		slices.SortFunc(r.Xattrs, func(a, b rpc.Xattr) int { return strings.Compare(a.Name, b.Name) })
		for i := range r.Xattrs {
			x := &r.Xattrs[i]
			if err := checkXattrChange(&rpc.XattrChange{Name: x.Name, Value: x.Value}); err != nil {
				return err
			}
			if i > 0 && x.Name == r.Xattrs[i-1].Name {
				return fmt.Errorf("extended attribute %q: %w: named twice", x.Name, fs.ErrInvalid)
			}
		}
		if n := store.XattrsLen(storeXattrs(r.Xattrs)); n > store.MaxXattrsLen {
			return fmt.Errorf("%w: extended attributes of %d bytes (at most %d)", rpc.ErrNoSpace, n, store.MaxXattrsLen)
		}
	}
	return checkText(r.Text)
}

// The client's limit on a text is the store's.
const _ = uint(store.MaxTextLen-rpc.MaxTextLen) + uint(rpc.MaxTextLen-store.MaxTextLen)

// checkText checks a file's text for the full-text index.
func checkText(text string) error {
	switch {
	case len(text) > rpc.MaxTextLen:
		return fmt.Errorf("%w: text of %d bytes (limit %d)", fs.ErrInvalid, len(text), rpc.MaxTextLen)
	case !utf8.ValidString(text):
		return fmt.Errorf("%w: text that is not valid UTF-8", fs.ErrInvalid)
	}
	return nil
}

func (h *home) handleHomeCreate(ctx context.Context, r *homeCreateReq) (*homeCreateResp, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	if p == "/" || storeType(r.Type) == 0 || checkCreate(r) != nil {
		return nil, fmt.Errorf("%w: bad create request", rpc.ErrBadRequest)
	}
	r.Path = p
	return h.coordCreate(ctx, r)
}

// coordCreate creates r.Path at its parent's home (this node).
func (h *home) coordCreate(ctx context.Context, r *homeCreateReq) (*homeCreateResp, error) {
	return retryBusy(ctx, h, func() (*homeCreateResp, error) { return h.coordCreateOnce(ctx, r) })
}

func (h *home) coordCreateOnce(ctx context.Context, r *homeCreateReq) (*homeCreateResp, error) {
	p := r.Path
	dir, _ := splitPath(p)
	op, err := h.beginParentOp(ctx, dir, p, []string{p}, []string{dir}, []string{p}, nil)
	if err != nil {
		return nil, err
	}
	if op == nil {
		return &homeCreateResp{homeStatus: notHomeHere}, nil
	}
	defer op.end()
	if err := op.allow(r.Caller, acl.Write|acl.Execute); err != nil {
		return nil, err
	}
	if rpc.SpecialType(r.Type) {
		if err := h.specialFormat(r.Type); err != nil {
			return nil, err
		}
	}
	return h.createPlaced(ctx, r, op)
}

// createPlaced places r.Path and creates it there, under op (which
// beginParentOp returned for its parent and whose transaction id it
// uses); when the chosen home does not answer, it places the child
// elsewhere, up to twice.
func (h *home) createPlaced(ctx context.Context, r *homeCreateReq, op *parentOp) (*homeCreateResp, error) {
	p := r.Path
	dir, _ := splitPath(p)
	var failed []string
	for {
		home := h.placeChild(ctx, dir, r.Type == rpc.TypeDir, failed...)
		if home == "" {
			return nil, fmt.Errorf("%w: no node takes new files", rpc.ErrUnavailable)
		}
		resp, err := h.createAt(ctx, r, op.txn, home, &op.dino)
		var pu *prepareUnreachable
		if err != nil && home != h.id && len(failed) < 2 && errors.As(err, &pu) && pu.node == home && ctx.Err() == nil {
			// The chosen home did not answer: the transaction was
			// aborted; place the child elsewhere.
			h.log.Debug("child home unavailable; placing elsewhere", "path", p, "home", home, "err", err)
			failed = append(failed, home)
			op.txn = h.newTxnID()
			continue
		}
		return resp, err
	}
}

// specialFormat refuses a special file of type t while the shard's log
// cannot carry one (batch format 3: docs/design.md, "Special files").
func (h *home) specialFormat(t string) error {
	if h.writesFormat(store.BatchFormatV3) {
		return nil
	}
	return fmt.Errorf("%w: a %s needs shard log format 3, which not every member of the cluster speaks yet: upgrade every node",
		errors.ErrUnsupported, t)
}

// newInode is the inode r creates, homed at home, below a parent whose
// inode is dino, with the new id id (ids.go).
func newInode(r *homeCreateReq, home string, dino *store.Inode, id uint64) rpc.Inode {
	dir, _ := splitPath(r.Path)
	now := time.Now().UnixNano()
	nlink := uint32(1)
	if r.Type == rpc.TypeDir {
		nlink = 2
	}
	mode, gid := inheritGroup(r, dino)
	return rpc.Inode{
		Path: r.Path, Type: r.Type, Mode: mode, UID: r.UID, GID: gid, Size: r.Size,
		Atime: cmp.Or(r.Atime, now), Mtime: cmp.Or(r.Mtime, now), Ctime: now, Nlink: nlink, Version: 1, Home: home,
		Layout: r.Layout, Target: r.Target, Rdev: r.Rdev, Text: r.Text, HasText: r.Text != "",
		Ancestors: wireCodes(store.ChildAncestors(store.PathDepth(dir), dino)), ID: id, Xattrs: r.Xattrs,
	}
}

// inheritGroup returns the mode and group of the inode r creates below a
// directory whose inode is dino. Below a directory with the setgid bit
// the inode takes the directory's group, and a new directory the bit too;
// a new file keeps a setgid bit it asks for only when its caller is in
// that group (Linux's inode_init_owner; without ACLs the caller is
// trusted, as Linux trusts CAP_FSETID). r.AsGiven (an import) keeps both
// as asked.
func inheritGroup(r *homeCreateReq, dino *store.Inode) (mode, gid uint32) {
	mode, gid = r.Mode, r.GID
	if r.AsGiven || dino == nil || dino.Mode&0o2000 == 0 {
		return mode, gid
	}
	gid = dino.GID
	switch {
	case r.Type == rpc.TypeDir:
		mode |= 0o2000
	case mode&0o2000 != 0 && !unrestricted(r.Caller) && !r.Caller.Management && !r.Caller.InGroup(gid):
		mode &^= 0o2000
	}
	return mode, gid
}

// chownedMode is the mode of an inode of type t and mode m after a chown,
// as Linux makes it (ATTR_KILL_SUID, ATTR_KILL_SGID): a file that is not a
// directory loses its setuid bit, and its setgid bit when it is group
// executable (without group execute the bit means mandatory locking, and
// stays). A chown that sets the mode too (as the kernel asks a mount's)
// keeps the mode it sets.
func chownedMode(t store.FileType, m uint32) uint32 {
	if t == store.TypeDir {
		return m
	}
	m &^= 0o4000
	if m&0o2010 == 0o2010 {
		m &^= 0o2000
	}
	return m
}

// addLocalCreate adds to b the create of ino and its entry, both homed
// here (the caller adds the check that the parent exists).
func addLocalCreate(b *store.Batch, ino *rpc.Inode) {
	dir, name := splitPath(ino.Path)
	b.RequireEntryAbsent(dir, name)
	b.RequireInodeAbsent(ino.Path)
	b.PutInode(ino.Path, storeInode(ino))
	b.PutEntry(dir, store.Entry{Name: name, Type: storeType(ino.Type), Home: ino.Home, ID: ino.ID})
}

// createAt creates r.Path homed at home; the caller (the parent's home)
// holds the name's lock and a registration, and read the parent's inode
// dino, whose codes and own search permission make the child's ancestor
// codes (HBA §4.2.2).
func (h *home) createAt(ctx context.Context, r *homeCreateReq, txn, home string, dino *store.Inode) (*homeCreateResp, error) {
	p := r.Path
	dir, name := splitPath(p)
	id, err := h.newID(ctx)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	ino := newInode(r, home, dino, id)
	ent := store.Entry{Name: name, Type: storeType(r.Type), Home: home, ID: id}
	if home == h.id {
		// The batch's preconditions are the only check that the name is
		// free: a read before it would cost every create a store lookup.
		var b store.Batch
		b.RequireInodeExists(dir)
		addLocalCreate(&b, &ino)
		if err := h.apply(ctx, &b); err != nil {
			if errors.Is(err, store.ErrExists) {
				return nil, fmt.Errorf("%s: %w", p, fs.ErrExist)
			}
			return nil, fmt.Errorf("create %s: %w", p, storeErr(err))
		}
		h.touch(p)
		return &homeCreateResp{Inode: *withoutText(ino)}, nil
	}
	// A name that exists fails before a transaction with another shard
	// starts (the caller holds the name's lock).
	if _, err := h.st.GetEntry(ctx, dir, name); err == nil {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrExist)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	plan := h.newPlan(txn)
	plan.add(home, h.id, []string{p}, txnOp{Kind: opPutInode, Path: p, Inode: &ino})
	plan.local = func(b *store.Batch) {
		b.RequireInodeExists(dir)
		b.RequireEntryAbsent(dir, name)
		b.PutEntry(dir, ent)
	}
	// A new directory's home is where its entries are made next: a file's
	// creator goes on at once, a directory's waits (DeliverWait at most)
	// until its home has the inode (else the next create in it meets a
	// part not yet applied there and finds the home by the query path and
	// the coordinator).
	plan.async = true
	if r.Type == rpc.TypeDir {
		plan.wait = h.r.tune.DeliverWait
	}
	if _, err := h.runTxn(ctx, plan); err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	return &homeCreateResp{Inode: *withoutText(ino), Hops: 2}, nil
}

// parentOp is a change of a directory's entries in progress at the
// directory's home (this node), which coordinates it: the locks of the
// names it changes, its registration in the flux table (flux.go) and its
// transaction id.
type parentOp struct {
	txn    string
	unlock func()
	reg    *opReg
	h      *home
	dir    string      // the directory
	dino   store.Inode // its inode, read under the locks
}

// beginParentOp starts a change of an entry of dir (for child, which error
// messages name): it takes the locks of names, registers the operation
// (parents must stay, targets change, removes may be deleted here) and
// checks that dir is a directory homed here. It returns nil without an
// error when dir is not homed here (the caller answers NotHome). The caller
// calls end.
func (h *home) beginParentOp(ctx context.Context, dir, child string, names, parents, targets, removes []string) (*parentOp, error) {
	keys := make([]string, len(names))
	for i, name := range names {
		keys[i] = "e:" + name
	}
	unlock, err := h.locks.lock(ctx, keys...)
	if err != nil {
		return nil, err
	}
	op := &parentOp{txn: h.newTxnID(), unlock: unlock, h: h, dir: dir}
	if op.reg, err = h.beginOp(ctx, op.txn, parents, targets, removes); err != nil {
		unlock()
		return nil, err
	}
	dino, err := h.st.GetInode(ctx, dir)
	switch {
	case errors.Is(err, store.ErrNotFound):
		op.end()
		return nil, nil
	case err != nil:
		op.end()
		return nil, err
	case dino.Type != store.TypeDir:
		op.end()
		return nil, fmt.Errorf("%s: %s: %w", child, dir, rpc.ErrNotDir)
	}
	op.dino = dino
	return op, nil
}

// end releases what beginParentOp took.
func (o *parentOp) end() {
	o.h.endOp(o.reg)
	o.unlock()
}

// Unlink removes a file.
func (n *Namespace) Unlink(ctx context.Context, path string) error { return n.remove(ctx, path, false) }

// Rmdir removes an empty directory.
func (n *Namespace) Rmdir(ctx context.Context, path string) error { return n.remove(ctx, path, true) }

func (n *Namespace) remove(ctx context.Context, path string, isDir bool) error {
	p, err := CleanPath(path)
	if err != nil {
		return err
	}
	if p == "/" {
		if !isDir {
			return fmt.Errorf("/: %w", rpc.ErrIsDir)
		}
		return fmt.Errorf("%w: the root cannot be removed", rpc.ErrInvalidPath)
	}
	dir, _ := splitPath(p)
	req := &homeRemoveReq{Path: p, Dir: isDir, Caller: caller(ctx)}
	_, _, err = atHome(ctx, n, target{path: dir, child: p, dir: true}, methodHomeRemove, req, (*home).coordRemove)
	return err
}

func (h *home) handleHomeRemove(ctx context.Context, r *homeRemoveReq) (*homeRemoveResp, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	if p == "/" {
		return nil, fmt.Errorf("%w: the root cannot be removed", rpc.ErrInvalidPath)
	}
	r.Path = p
	return h.coordRemove(ctx, r)
}

// coordRemove unlinks or rmdirs r.Path at its parent's home (this node).
func (h *home) coordRemove(ctx context.Context, r *homeRemoveReq) (*homeRemoveResp, error) {
	return retryBusy(ctx, h, func() (*homeRemoveResp, error) { return h.coordRemoveOnce(ctx, r) })
}

func (h *home) coordRemoveOnce(ctx context.Context, r *homeRemoveReq) (*homeRemoveResp, error) {
	p := r.Path
	dir, name := splitPath(p)
	op, err := h.beginParentOp(ctx, dir, p, []string{p}, []string{dir}, nil, []string{p})
	if err != nil {
		return nil, err
	}
	if op == nil {
		return &homeRemoveResp{homeStatus: notHomeHere}, nil
	}
	defer op.end()
	if err := op.allow(r.Caller, acl.Write|acl.Execute); err != nil {
		return nil, err
	}
	e, err := h.entry(ctx, dir, name)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Dir && e.Type != store.TypeDir:
		return nil, fmt.Errorf("%s: %w", p, rpc.ErrNotDir)
	case !r.Dir && e.Type == store.TypeDir:
		return nil, fmt.Errorf("%s: %w", p, rpc.ErrIsDir)
	}
	owner := stickyOwner(r.Caller, &op.dino)
	if e.Home == h.id {
		ino, err := h.st.GetInode(ctx, p)
		if err != nil {
			return nil, storeErr(err)
		}
		if ino.Anchor != "" {
			return h.removeLinked(ctx, r, op, &ino, owner)
		}
		if owner != nil {
			if err := checkOwner(p, &ino, owner); err != nil {
				return nil, err
			}
		}
		var b store.Batch
		b.RequireEntryExists(dir, name)
		// The inode as read: its contents' objects go to the trash with
		// it (trash.go), and a change meanwhile retries the remove.
		b.RequireInodeVersion(p, ino.Version)
		if r.Dir {
			b.RequireDirEmpty(p)
		}
		b.DeleteEntry(dir, name)
		b.DeleteInode(p)
		trashChange(&b, op.txn, p, &ino, nil)
		if err := h.apply(ctx, &b); err != nil {
			return nil, fmt.Errorf("remove %s: %w", p, storeErr(err))
		}
		return &homeRemoveResp{}, nil
	}
	plan := h.newPlan(op.txn)
	if r.stub != nil && owner != nil {
		// A stub has no owner: its record has (hardlinks.go).
		if err := h.linkedOwner(ctx, p, owner); err != nil {
			return nil, err
		}
		owner = nil
	}
	plan.add(e.Home, h.id, []string{p}, txnOp{Kind: opDelInode, Path: p, Type: typeString(e.Type), EmptyDir: r.Dir, RequireOwner: owner, Stub: r.stub})
	if r.stub != nil {
		linkCount(plan, h.id, r.stub, -1)
	}
	plan.local = func(b *store.Batch) {
		b.RequireEntryExists(dir, name)
		b.DeleteEntry(dir, name)
	}
	plan.async = true
	if _, err := h.runTxn(ctx, plan); err != nil {
		if stub, ok := learnStub(err, p); ok {
			r.stub = stub // (the retry plans with it)
		}
		return nil, fmt.Errorf("remove %s: %w", p, err)
	}
	return &homeRemoveResp{Hops: 2}, nil
}

// ReadDir returns one page of a directory, sorted by name.
func (n *Namespace) ReadDir(ctx context.Context, r *rpc.ReadDirRequest) (*rpc.ReadDirResponse, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	limit := r.Limit
	switch {
	case limit < 0:
		return nil, fmt.Errorf("%w: negative limit %d", fs.ErrInvalid, limit)
	case limit == 0:
		limit = DefaultReadDirLimit
	case limit > MaxReadDirLimit:
		limit = MaxReadDirLimit
	}
	if r.After != "" && (len(r.After) > MaxNameLen || containsSlashOrNUL(r.After)) {
		return nil, fmt.Errorf("%w: bad page start %q", fs.ErrInvalid, r.After)
	}
	req := &homeReadDirReq{Path: p, After: r.After, Limit: limit, Caller: caller(ctx)}
	resp, _, err := atHome(ctx, n, target{path: p, dir: true}, methodHomeReadDir, req, (*home).readDirHere)
	if err != nil {
		return nil, err
	}
	if resp.Entries == nil {
		resp.Entries = []rpc.DirEntry{}
	}
	out := &rpc.ReadDirResponse{Entries: resp.Entries, Next: resp.Next}
	for _, e := range resp.Entries {
		if _, done := out.HomeAddrs[e.Home]; done || e.Home == "" {
			continue
		}
		if out.HomeAddrs == nil {
			out.HomeAddrs = make(map[string]string)
		}
		out.HomeAddrs[e.Home] = n.addrOfShard(e.Home)
	}
	return out, nil
}

// SetAttr changes the attributes of a path at its home.
func (n *Namespace) SetAttr(ctx context.Context, r *rpc.SetAttrRequest) (*rpc.SetAttrResponse, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	if err := checkSetAttr(r); err != nil {
		return nil, err
	}
	req := &homeSetAttrReq{Req: *r, Caller: caller(ctx)}
	req.Req.Path = p
	resp, _, err := atHome(ctx, n, target{path: p}, methodHomeSetAttr, req, (*home).setAttrHere)
	if err != nil {
		return nil, err
	}
	return &rpc.SetAttrResponse{Inode: resp.Inode}, nil
}

func checkSetAttr(r *rpc.SetAttrRequest) error {
	if r.Mode != nil && *r.Mode&^0o7777 != 0 {
		return fmt.Errorf("%w: mode %#o has bits outside 0o7777", fs.ErrInvalid, *r.Mode)
	}
	if r.Size != nil && *r.Size < 0 {
		return fmt.Errorf("%w: negative size %d", fs.ErrInvalid, *r.Size)
	}
	if len(r.Layout) > store.MaxBlobLen {
		return fmt.Errorf("%w: layout of %d bytes (limit %d)", fs.ErrInvalid, len(r.Layout), store.MaxBlobLen)
	}
	if r.Text != nil {
		if err := checkText(*r.Text); err != nil {
			return err
		}
	}
	if r.Accessed && (r.Atime == nil || r.Mode != nil || r.UID != nil || r.GID != nil || r.Size != nil ||
		r.Mtime != nil || len(r.Layout) > 0 || r.Text != nil || r.Xattr != nil) {
		return fmt.Errorf("%w: an access (accessed) sets the atime and nothing else", fs.ErrInvalid)
	}
	if r.Xattr != nil {
		return checkXattrChange(r.Xattr)
	}
	return nil
}

// checkXattrChange checks a change of an extended attribute as
// setxattr(2) and removexattr(2) check their arguments.
func checkXattrChange(x *rpc.XattrChange) error {
	switch {
	case strings.HasPrefix(x.Name, "system."):
		return fmt.Errorf("extended attribute %q: %w: the cluster keeps no system attributes (such as POSIX ACLs)", x.Name, errors.ErrUnsupported)
	case store.XattrNamespace(x.Name) == "":
		return fmt.Errorf("extended attribute %q: %w: the cluster keeps the namespaces %v only", x.Name, errors.ErrUnsupported, store.XattrNamespaces)
	case x.Remove && (x.Create || x.Replace || len(x.Value) > 0):
		return fmt.Errorf("extended attribute %q: %w: a remove with a value or a flag", x.Name, fs.ErrInvalid)
	case len(x.Value) > store.MaxXattrValueLen:
		return fmt.Errorf("extended attribute %q: %w: a value of %d bytes (at most %d)", x.Name, fs.ErrInvalid, len(x.Value), store.MaxXattrValueLen)
	}
	return store.CheckXattrName(x.Name)
}

// changeXattr applies x to the extended attributes of ino (at path p).
func changeXattr(p string, ino *store.Inode, x *rpc.XattrChange) error {
	i, ok := store.XattrIndex(ino.Xattrs, x.Name)
	switch {
	case x.Remove && !ok, x.Replace && !ok:
		return fmt.Errorf("%s: %w: %s", p, rpc.ErrNoAttr, x.Name)
	case x.Remove:
		ino.Xattrs = slices.Delete(slices.Clone(ino.Xattrs), i, i+1)
		if len(ino.Xattrs) == 0 {
			ino.Xattrs = nil
		}
		return nil
	case x.Create && ok:
		return fmt.Errorf("%s: extended attribute %s: %w", p, x.Name, fs.ErrExist)
	}
	xs := slices.Clone(ino.Xattrs)
	if ok {
		xs[i].Value = x.Value
	} else {
		xs = slices.Insert(xs, i, store.Xattr{Name: x.Name, Value: x.Value})
	}
	if n := store.XattrsLen(xs); n > store.MaxXattrsLen {
		return fmt.Errorf("%s: %w: its extended attributes would take %d bytes (at most %d)", p, rpc.ErrNoSpace, n, store.MaxXattrsLen)
	}
	ino.Xattrs = xs
	return nil
}

func (h *home) handleHomeSetAttr(ctx context.Context, r *homeSetAttrReq) (*homeSetAttrResp, error) {
	p, err := CleanPath(r.Req.Path)
	if err != nil {
		return nil, err
	}
	if err := checkSetAttr(&r.Req); err != nil {
		return nil, err
	}
	r.Req.Path = p
	return h.setAttrHere(ctx, r)
}

// setAttrHere changes a path homed here.
func (h *home) setAttrHere(ctx context.Context, req *homeSetAttrReq) (*homeSetAttrResp, error) {
	return retryBusy(ctx, h, func() (*homeSetAttrResp, error) { return h.setAttrOnce(ctx, req) })
}

func (h *home) setAttrOnce(ctx context.Context, req *homeSetAttrReq) (*homeSetAttrResp, error) {
	r := &req.Req
	p := r.Path
	unlock, err := h.locks.lock(ctx, "a:"+p)
	if err != nil {
		return nil, err
	}
	defer unlock()
	txn := h.newTxnID()
	reg, err := h.beginOp(ctx, txn, []string{p}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer h.endOp(reg)
	ino, err := h.st.GetInode(ctx, p)
	if errors.Is(err, store.ErrNotFound) {
		return &homeSetAttrResp{homeStatus: notHomeHere}, nil
	} else if err != nil {
		return nil, err
	}
	if ino.Anchor != "" {
		return h.setAttrLinked(ctx, req, p, &ino)
	}
	if r.Size != nil && ino.Type == store.TypeDir {
		return nil, fmt.Errorf("%s: cannot set the size of a directory: %w", p, rpc.ErrIsDir)
	}
	if r.Size != nil && ino.Type == store.TypeSymlink {
		return nil, fmt.Errorf("%s: %w: the size of a symlink is its target's length", p, fs.ErrInvalid)
	}
	if r.Size != nil && ino.Type.Special() {
		return nil, fmt.Errorf("%s: %w: a %s has no size", p, fs.ErrInvalid, ino.Type)
	}
	if r.Text != nil && *r.Text != "" && ino.Type != store.TypeFile {
		return nil, fmt.Errorf("%s: %w: only a regular file has a text", p, fs.ErrInvalid)
	}
	if r.IfID != 0 && ino.ID != r.IfID {
		return nil, fmt.Errorf("setattr %s: %w: the path names inode %d now, not %d", p, rpc.ErrVersionMismatch, ino.ID, r.IfID)
	}
	if r.IfVersion != nil && ino.Version != *r.IfVersion {
		// The batch below requires the version read here, so a change
		// between this check and the commit fails it and retries.
		return nil, fmt.Errorf("setattr %s: %w: the inode is at version %d, not %d", p, rpc.ErrVersionMismatch, ino.Version, *r.IfVersion)
	}
	if r.Accessed {
		if err := checkAccessBy(req.Caller, p, &ino); err != nil {
			return nil, err
		}
	} else if err := checkSetAttrBy(req.Caller, p, &ino, r); err != nil {
		return nil, err
	}
	before := ino
	old := ino.Version
	now := time.Now().UnixNano()
	if r.Mode != nil {
		ino.Mode = *r.Mode
	}
	if r.UID != nil {
		ino.UID = *r.UID
	}
	if r.GID != nil {
		ino.GID = *r.GID
	}
	if (r.UID != nil || r.GID != nil) && r.Mode == nil {
		ino.Mode = chownedMode(ino.Type, ino.Mode)
	}
	if r.Size != nil {
		ino.Size = *r.Size
		if r.Mtime == nil {
			ino.Mtime = now
		}
	}
	if r.Atime != nil {
		ino.Atime = *r.Atime
	}
	if r.Mtime != nil {
		ino.Mtime = *r.Mtime
	}
	if len(r.Layout) > 0 {
		ino.Layout = r.Layout
	}
	if r.Text != nil {
		ino.Text = *r.Text
	}
	if r.Xattr != nil {
		if err := changeXattr(p, &ino, r.Xattr); err != nil {
			return nil, err
		}
	}
	if r.Size != nil && *r.Size < before.Size && len(r.Layout) == 0 && collects(p, &before) {
		// A file shrunk without a new layout: no block past the new size
		// stays referenced (its objects go to the trash below).
		if l, err := contents.DecodeLayout(before.Layout); err == nil && len(l.Extents) > 0 {
			// Every committed object must read as zeros past the file's
			// size (node/contents, "Writing and committing"), so that
			// growing the file again needs no object change. A shrink into
			// a block that has an object would leave its old tail behind:
			// only a client that rewrites that block (the mount's
			// contents.File.Truncate, with the new layout) may make it.
			if bs := l.BlockLen(); *r.Size%bs != 0 {
				if _, ok := l.Gen(uint64(*r.Size / bs)); ok {
					return nil, fmt.Errorf("%w: %s: shrinking a file whose contents are in the data store into one of its blocks needs the block rewritten: truncate it through a mount", fs.ErrInvalid, p)
				}
			}
			l.Truncate(*r.Size)
			ino.Layout = l.Encode()
		}
	}
	if !r.Accessed { // reading a file changes its atime, not its ctime
		ino.Ctime = now
	}
	ino.Version++
	local := func(b *store.Batch) {
		b.RequireInodeVersion(p, old)
		b.PutInode(p, ino)
		// The objects the new layout drops, trashed with the change
		// (trash.go).
		trashChange(b, txn, p, &before, &ino)
	}
	if code, changed := codeChange(p, &before, &ino); changed {
		// The search permission the directory gives its subtree changed:
		// every shard rewrites its descendants' codes, in one transaction
		// with the change (like a directory rename's re-key).
		plan := h.newPlan(txn)
		for _, s := range h.r.subtreeShards(h.id) {
			plan.add(s, h.id, []string{p}, txnOp{Kind: opRecode, Path: p, Code: code})
		}
		plan.local = local
		if _, err := h.runTxn(ctx, plan); err != nil {
			return nil, fmt.Errorf("setattr %s: %w", p, err)
		}
	} else {
		var b store.Batch
		local(&b)
		if err := h.apply(ctx, &b); err != nil {
			return nil, fmt.Errorf("setattr %s: %w", p, storeErr(err))
		}
	}
	h.touch(p)
	return &homeSetAttrResp{Inode: wireInode(p, h.id, &ino)}, nil
}

// codeChange returns the new ancestor code of directory p when a change
// of its inode from before to after changes the search permission it
// gives its subtree (HBA §4.2.2), and whether it does. A file's or an
// unchanged code: false.
func codeChange(p string, before, after *store.Inode) (*rpc.AncestorCode, bool) {
	if after.Type != store.TypeDir {
		return nil, false
	}
	d := store.PathDepth(p)
	was, wasOK := store.SearchCode(d, before)
	now, nowOK := store.SearchCode(d, after)
	if wasOK == nowOK && was == now {
		return nil, false
	}
	if !nowOK {
		return nil, true
	}
	c := rpc.AncestorCode(now)
	return &c, true
}

// entry returns entry name of directory dir, which this node homes, or an
// error matching fs.ErrNotExist naming the child's path.
func (h *home) entry(ctx context.Context, dir, name string) (store.Entry, error) {
	e, err := h.st.GetEntry(ctx, dir, name)
	if errors.Is(err, store.ErrNotFound) {
		return e, notExist(joinPath(dir, name))
	}
	return e, err
}

// notExist wraps fs.ErrNotExist for path p.
func notExist(p string) error { return fmt.Errorf("%s: %w", p, fs.ErrNotExist) }
