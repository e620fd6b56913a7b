package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// The participant side of transactions (docs/design.md, "Transactions"):
// the prepared parts a home holds, the paths they mark (flux.go), and
// their resolution — asking a part's coordinator how its transaction ended
// and applying or discarding the part. This is the transactions' recovery:
// reads never run it themselves; they wait for it through inFlight.

// inFlight is all a read at a home needs of the transactions in progress
// there.
type inFlight interface {
	// settled returns once no prepared part that marks p or an ancestor
	// of p (with entries, also one of p's direct entries) is left whose
	// outcome its coordinator can tell: each such part has been applied,
	// discarded, or found still pending (the read then sees the state
	// before it). An error means a coordinator could not be asked: the
	// read must answer unavailable.
	settled(ctx context.Context, p string, entries bool) error
	// inFlux reports, without waiting, whether a prepared part marks p or
	// an ancestor of p.
	inFlux(p string) bool
}

// participant holds a home's prepared parts and resolves them.
type participant struct {
	h    *home // the shard's writes, its coordinators' addresses, its tasks
	flux fluxTable
	mu   sync.Mutex // guards byID
	byID map[string]*partTxn
}

// resolution is one resolution of a prepared part in progress: readers
// that meet the part meanwhile wait for it instead of asking the
// coordinator again.
type resolution struct {
	// started is when the resolution began, before its question to the
	// coordinator: a "pending" answer holds for a reader that arrived
	// before started only.
	started time.Time
	done    chan struct{}
	pending bool  // the coordinator answered that it is still undecided
	err     error // the coordinator could not be asked, or the write failed
}

func (t *participant) init(h *home) {
	t.h = h
	t.flux.init()
	t.byID = make(map[string]*partTxn)
}

// count returns the number of prepared parts held.
func (t *participant) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// get returns the prepared part of transaction id, or nil.
func (t *participant) get(id string) *partTxn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// inFlux reports whether a prepared part marks p or an ancestor of p.
func (t *participant) inFlux(p string) bool {
	f := &t.flux
	if f.count.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.markAtOrAbove(p, "") != nil
}

// settled waits for the resolution of every mark at or above p (and, with
// entries, on p's direct entries) before a read of p at this node. Marks
// deeper under p do not change p's listing, so they are left alone: a
// pending create of /a/b/c whose coordinator is down must not make a
// readdir of / unavailable. A part found pending is left alone: the
// reader sees the state before it.
func (t *participant) settled(ctx context.Context, p string, entries bool) error {
	f := &t.flux
	if f.count.Load() == 0 {
		return nil
	}
	var tried []*partTxn
	for {
		f.mu.Lock()
		var m *partTxn
		if c := f.markAtOrAbove(p, ""); c != nil && !slices.Contains(tried, c) {
			m = c
		} else if entries {
			for mp, c := range f.marks {
				if mp != "/" && directParent(mp) == p && !slices.Contains(tried, c) {
					m = c
					break
				}
			}
		}
		f.mu.Unlock()
		if m == nil {
			return nil
		}
		tried = append(tried, m)
		if _, err := t.await(ctx, m); err != nil {
			return err
		}
	}
}

// await waits for a resolution of part p that began after the call: one
// in progress that began later, or a new one. An answer the coordinator
// gave before a reader arrived may be stale for it ("pending", and the
// transaction committed and acknowledged since), so a resolution that
// began earlier is waited for and then followed by one of the reader's
// own, unless it finished the part. The resolution runs on the home's
// tasks, bounded by LeaderWait+PeerTimeout (the coordinator's shard may be
// electing a leader), whether or not ctx ends first.
func (t *participant) await(ctx context.Context, p *partTxn) (pending bool, err error) {
	arrived := time.Now()
	for {
		if p.finished.Load() {
			return false, nil
		}
		r := t.resolution(p)
		select {
		case <-r.done:
		case <-ctx.Done():
			return false, fmt.Errorf("waiting for transaction %s: %w: %w", p.id, rpc.ErrUnavailable, ctx.Err())
		}
		if !r.started.Before(arrived) {
			return r.pending, r.err
		}
	}
}

// errCutShort matches the error of a request that waited for the
// resolution of a prepared part when the home stopped (its leadership
// moved) and cut the resolution short: nothing of the request was done,
// and the shard's next leader can serve it.
var errCutShort = errors.New("the shard's leadership moved while a transaction it waited for was being resolved")

// resolution returns p's resolution in progress, or starts one.
func (t *participant) resolution(p *partTxn) *resolution {
	p.resMu.Lock()
	if r := p.resolving; r != nil {
		p.resMu.Unlock()
		return r
	}
	r := &resolution{started: time.Now(), done: make(chan struct{})}
	p.resolving = r
	p.resMu.Unlock()
	finish := func(pending bool, err error) {
		p.resMu.Lock()
		p.resolving = nil
		p.resMu.Unlock()
		r.pending, r.err = pending, err
		close(r.done)
	}
	h := t.h
	if !h.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(h.ctx, h.r.tune.LeaderWait+h.r.tune.PeerTimeout)
		defer cancel()
		pending, err := t.resolve(ctx, p)
		if err != nil && h.ctx.Err() != nil {
			// The home stopped meanwhile (its leadership was handed
			// over, say), which cut the resolution short. The request
			// waiting for it has changed nothing yet: a caller on this
			// node sends it on to the next leader ("shutting down" is
			// retryable), and a remote caller's request is sent on by
			// shardRPC (errCutShort), so that neither fails.
			err = fmt.Errorf("transaction %s: %w: %w: %w",
				p.id, errCutShort, rpc.ErrShuttingDown, rpc.ErrUnavailable)
		}
		finish(pending, err)
	}) {
		// The home stopped: its leadership moved (or ended). Nothing was
		// done; "not the leader" sends the request on to the next
		// leader, which resolves the part (docs/design.md, "Planned
		// leadership moves").
		finish(false, fmt.Errorf("transaction %s: %w", p.id, h.notLeader()))
	}
	return r
}

func (h *home) handlePrepare(ctx context.Context, r *txnPrepareReq) (*txnPrepareResp, error) {
	if r.TxnID == "" || r.Coordinator == "" || len(r.TxnID) > 512 {
		return nil, fmt.Errorf("%w: prepare without a transaction id or coordinator", rpc.ErrBadRequest)
	}
	for _, m := range r.Marks {
		if c, err := CleanPath(m); err != nil || c != m {
			return nil, fmt.Errorf("%w: bad mark %q", rpc.ErrBadRequest, m)
		}
	}
	return h.preparePart(ctx, r)
}

// preparePart stages a part at this node (see the package comment above).
func (h *home) preparePart(ctx context.Context, r *txnPrepareReq) (*txnPrepareResp, error) {
	p := &partTxn{id: r.TxnID, coord: r.Coordinator, ops: r.Ops, marks: r.Marks, born: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	h.txns.mu.Lock()
	if old := h.txns.byID[p.id]; old != nil {
		h.txns.mu.Unlock()
		return &txnPrepareResp{Rekeyed: old.rekeyed}, nil // a repeated prepare
	}
	h.txns.byID[p.id] = p
	h.txns.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			p.rv.end()
			h.txns.removeMarks(p)
			h.txns.mu.Lock()
			if h.txns.byID[p.id] == p {
				delete(h.txns.byID, p.id)
			}
			h.txns.mu.Unlock()
			p.finished.Store(true)
		}
	}()
	var wait []chan struct{}
	for attempt := 0; ; attempt++ {
		var conflict *partTxn
		wait, conflict = h.txns.addMarks(p)
		if conflict == nil {
			break
		}
		if attempt >= 2 {
			return &txnPrepareResp{Busy: true}, nil
		}
		pending, err := h.txns.await(ctx, conflict)
		if err != nil || pending {
			return &txnPrepareResp{Busy: true}, nil
		}
	}
	if !waitAll(ctx, wait, h.r.tune.StageWait) {
		return &txnPrepareResp{Busy: true}, nil
	}
	busy, err := h.checkOps(ctx, p)
	if err != nil {
		return nil, err
	}
	if busy {
		return &txnPrepareResp{Busy: true, Stub: p.stub}, nil
	}
	paths, prefixes := p.changes()
	if p.rv, err = h.revoke(ctx, paths, prefixes, true); err != nil {
		return nil, err
	}
	var b store.Batch
	b.PutIntent(partPrefix+p.id, p.record())
	if err := h.apply(ctx, &b); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", p.id, err)
	}
	ok = true
	return &txnPrepareResp{Rekeyed: p.rekeyed}, nil
}

// checkOps checks the preconditions of a part's ops against the store.
// busy means the state is not what the coordinator saw (it retries).
func (h *home) checkOps(ctx context.Context, p *partTxn) (busy bool, err error) {
	deleted := map[string]bool{}
	for i := range p.ops {
		op := &p.ops[i]
		switch op.Kind {
		case opPutInode:
			if op.Inode == nil || storeType(op.Inode.Type) == 0 {
				return false, fmt.Errorf("%w: put_inode without a valid inode", rpc.ErrBadRequest)
			}
			if op.Anchor != "" && !h.writesFormat(store.BatchFormatV7) {
				return false, fmt.Errorf("%s: %w: a replica of shard %s runs a build without hard links", op.Path, errors.ErrUnsupported, h.id)
			}
			if _, err := h.st.GetInode(ctx, op.Path); err == nil {
				return false, fmt.Errorf("%s: %w", op.Path, fs.ErrExist)
			} else if !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
		case opDelInode, opMoveInode:
			ino, err := h.st.GetInode(ctx, op.Path)
			if errors.Is(err, store.ErrNotFound) {
				return true, nil // moved or removed since the coordinator looked
			} else if err != nil {
				return false, err
			}
			if err := typeMismatch(op.Path, op.Type, ino.Type); err != nil {
				return false, err
			}
			if (ino.Anchor != "") != (op.Stub != nil) || op.Stub != nil && (op.Stub.Anchor != ino.Anchor || op.Stub.ID != ino.ID) {
				// A name of an inode with several, or no longer: the
				// coordinator plans again with the record's part
				// (hardlinks.go).
				p.stub = &stubRef{Anchor: ino.Anchor, ID: ino.ID, Path: op.Path}
				return true, nil
			}
			// (A stub has no owner: the coordinator checked its record's,
			// linkedOwner.)
			if ino.Anchor == "" {
				if err := checkOwner(op.Path, &ino, op.RequireOwner); err != nil {
					return false, err
				}
			}
			if op.EmptyDir && ino.Type == store.TypeDir {
				ents, _, err := h.st.ReadDir(ctx, op.Path, "", 1)
				if err != nil {
					return false, err
				}
				if len(ents) > 0 {
					return false, fmt.Errorf("%s: %w", op.Path, rpc.ErrNotEmpty)
				}
			}
			if op.Kind == opDelInode {
				deleted[op.Path] = true
				continue
			}
			if !deleted[op.New] {
				if _, err := h.st.GetInode(ctx, op.New); err == nil {
					return true, nil
				} else if !errors.Is(err, store.ErrNotFound) {
					return false, err
				}
			}
		case opPutEntry, opDelEntry:
			if op.Entry == nil {
				return false, fmt.Errorf("%w: entry op without an entry", rpc.ErrBadRequest)
			}
			dir, err := h.st.GetInode(ctx, op.Path)
			if errors.Is(err, store.ErrNotFound) {
				return true, nil // the directory is not (any more) homed here
			} else if err != nil {
				return false, err
			}
			if dir.Type != store.TypeDir {
				return false, fmt.Errorf("%s: %w", op.Path, rpc.ErrNotDir)
			}
			if op.DirVersion != 0 && dir.Version != op.DirVersion {
				return true, nil // changed (its codes, say) since the coordinator read it
			}
			cur, err := h.st.GetEntry(ctx, op.Path, op.Entry.Name)
			exists := err == nil
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
			switch {
			case op.Kind == opPutEntry && op.ExpectAbsent:
				if exists {
					return true, nil
				}
			case !exists:
				return true, nil
			case op.ExpectHome != "" && cur.Home != op.ExpectHome,
				op.ExpectType != "" && typeString(cur.Type) != op.ExpectType:
				return true, nil
			}
		case opRekey:
			if op.Path == "/" || op.New == "/" || isUnder(op.New, op.Path) || isUnder(op.Path, op.New) {
				return false, fmt.Errorf("%w: cannot rename %s to %s", rpc.ErrInvalidPath, op.Path, op.New)
			}
			var blocked bool
			err := h.st.ScanInodesUnder(ctx, op.New, func(q string, _ store.Inode) error {
				if q == op.New && deleted[q] {
					return nil
				}
				blocked = true
				return errStopScan
			})
			if err != nil && !errors.Is(err, errStopScan) {
				return false, err
			}
			if blocked {
				return true, nil
			}
			var cnt int64
			longest := len(op.Path)
			err = h.st.ScanInodesUnder(ctx, op.Path, func(q string, _ store.Inode) error {
				cnt++
				longest = max(longest, len(q))
				return nil
			})
			if err != nil {
				return false, err
			}
			if n, limit := longest-len(op.Path)+len(op.New), h.maxPathLen(); n > limit {
				return false, fmt.Errorf("%w: %w: renaming %s to %s would make a path of %d bytes here (at most %d)",
					rpc.ErrInvalidPath, rpc.ErrNameTooLong, op.Path, op.New, n, limit)
			}
			p.rekeyed += cnt
		case opRecode:
			if c, err := CleanPath(op.Path); err != nil || c != op.Path || (op.Code != nil && int(op.Code.Depth) != store.PathDepth(c)) {
				return false, fmt.Errorf("%w: bad recode of %q", rpc.ErrBadRequest, op.Path)
			}
		case opLinkFirst, opLinkCount:
			if busy, err := h.checkLinkOp(ctx, op); busy || err != nil {
				return busy, err
			}
		default:
			return false, fmt.Errorf("%w: unknown op %q", rpc.ErrBadRequest, op.Kind)
		}
	}
	return false, nil
}

var errStopScan = errors.New("stop scan")

// typeMismatch returns the error for an operation that expected type want
// ("" = any) on a path of type got.
func typeMismatch(p, want string, got store.FileType) error {
	switch {
	case want != "" && want != rpc.TypeDir && got == store.TypeDir:
		return fmt.Errorf("%s: %w", p, rpc.ErrIsDir)
	case want == rpc.TypeDir && got != store.TypeDir:
		return fmt.Errorf("%s: %w", p, rpc.ErrNotDir)
	}
	return nil
}

func (h *home) handleCommit(ctx context.Context, r *txnEndReq) (*txnEndResp, error) {
	p := h.txns.get(r.TxnID)
	if p == nil {
		return &txnEndResp{}, nil // already applied
	}
	if err := h.txns.apply(p); err != nil {
		return nil, err
	}
	return &txnEndResp{}, nil
}

func (h *home) handleAbort(ctx context.Context, r *txnEndReq) (*txnEndResp, error) {
	p := h.txns.get(r.TxnID)
	if p == nil {
		return &txnEndResp{}, nil
	}
	if err := h.txns.abort(p); err != nil {
		return nil, err
	}
	return &txnEndResp{}, nil
}

// apply makes a committed part visible (idempotent).
func (t *participant) apply(p *partTxn) error {
	h := t.h
	ctx := h.ctx
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished.Load() {
		return nil
	}
	subtree := hasSubtreeOp(p.ops)
	if !p.committed.Load() {
		var b store.Batch
		for i := range p.ops {
			op := &p.ops[i]
			switch op.Kind {
			case opPutInode:
				ino := storeInode(op.Inode)
				ino.Anchor = op.Anchor
				b.PutInode(op.Path, ino)
			case opLinkFirst, opLinkCount:
				if err := h.applyLinkOp(ctx, &b, p.id, i, op); err != nil {
					return err
				}
			case opDelInode:
				// The part's marks keep the inode as it is now until
				// the part is applied: its contents' objects go to the
				// trash with it (trash.go).
				ino, err := h.st.GetInode(ctx, op.Path)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if err == nil {
					trashChange(&b, fmt.Sprintf("%s/%d", p.id, i), op.Path, &ino, nil)
				}
				b.DeleteInode(op.Path)
			case opMoveInode:
				ino, err := h.st.GetInode(ctx, op.Path)
				if err != nil {
					if errors.Is(err, store.ErrNotFound) {
						h.log.Error("commit: moved inode missing", "txn", p.id, "path", op.Path)
						continue
					}
					return err
				}
				b.RequireInodeVersion(op.Path, ino.Version)
				ino.Ctime = op.Ctime
				ino.Version++
				ino.Ancestors = storeCodes(op.Ancestors)
				b.DeleteInode(op.Path)
				b.PutInode(op.New, ino)
			case opPutEntry:
				b.PutEntry(op.Path, storeEntry(op.Entry))
			case opDelEntry:
				b.DeleteEntry(op.Path, op.Entry.Name)
			}
		}
		pid := partPrefix + p.id
		if subtree {
			p.committed.Store(true)
			b.PutIntent(pid, p.record())
		} else {
			b.DeleteIntent(pid)
		}
		if err := h.applyMarked(ctx, &b); err != nil {
			p.committed.Store(false)
			return fmt.Errorf("commit %s: %w", p.id, err)
		}
		p.committed.Store(true)
	}
	for i := range p.ops {
		switch op := &p.ops[i]; op.Kind {
		case opRekey:
			if err := h.rekey(ctx, op.Path, op.New, storeCodes(op.Ancestors)); err != nil {
				return fmt.Errorf("rekey %s -> %s: %w", op.Path, op.New, err)
			}
		case opRecode:
			var code *store.AncestorCode
			if op.Code != nil {
				c := store.AncestorCode(*op.Code)
				code = &c
			}
			if err := h.recode(ctx, op.Path, code); err != nil {
				return fmt.Errorf("recode %s: %w", op.Path, err)
			}
		}
	}
	if subtree {
		var b store.Batch
		b.DeleteIntent(partPrefix + p.id)
		if err := h.apply(ctx, &b); err != nil {
			return err
		}
		h.r.counters.rekeyed.Add(uint64(p.rekeyed))
	}
	t.finish(p)
	return nil
}

// changes returns the paths (inodes, and names whose entry is put or
// deleted) and the subtrees p's ops change.
func (p *partTxn) changes() (paths, prefixes []string) {
	for i := range p.ops {
		switch op := &p.ops[i]; op.Kind {
		case opPutInode, opDelInode, opLinkCount:
			paths = append(paths, op.Path)
		case opLinkFirst:
			paths = append(paths, op.Path, store.LinkRecordPath(op.ID))
		case opMoveInode:
			paths = append(paths, op.Path, op.New)
		case opPutEntry, opDelEntry:
			if op.Entry != nil { // a name appears or goes: leases on its absence end
				paths = append(paths, joinPath(op.Path, op.Entry.Name))
			}
		case opRekey:
			prefixes = append(prefixes, op.Path, op.New)
		case opRecode:
			prefixes = append(prefixes, op.Path)
		}
	}
	return paths, prefixes
}

// hasSubtreeOp reports whether ops hold a change of a whole subtree
// (rekey, recode), which runs after the part's batch.
func hasSubtreeOp(ops []txnOp) bool {
	for i := range ops {
		if ops[i].Kind == opRekey || ops[i].Kind == opRecode {
			return true
		}
	}
	return false
}

// abort discards a prepared part (idempotent).
func (t *participant) abort(p *partTxn) error {
	h := t.h
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished.Load() {
		return nil
	}
	if p.committed.Load() {
		return fmt.Errorf("abort %s: part already committed", p.id)
	}
	var b store.Batch
	b.DeleteIntent(partPrefix + p.id)
	if err := h.apply(h.ctx, &b); err != nil {
		return fmt.Errorf("abort %s: %w", p.id, err)
	}
	t.finish(p)
	return nil
}

func (t *participant) finish(p *partTxn) {
	p.finished.Store(true)
	p.rv.end()
	t.removeMarks(p)
	t.mu.Lock()
	if t.byID[p.id] == p {
		delete(t.byID, p.id)
	}
	t.mu.Unlock()
}

// resolve asks the coordinator how p's transaction ended and applies
// or discards p. pending reports a transaction still undecided.
func (t *participant) resolve(ctx context.Context, p *partTxn) (pending bool, err error) {
	h := t.h
	if p.finished.Load() {
		return false, nil
	}
	if p.committed.Load() {
		return false, t.apply(p) // a re-key still running: wait for it
	}
	state, err := t.coordState(ctx, p.coord, p.id)
	if err != nil {
		return false, fmt.Errorf("resolving transaction %s with its coordinator %s: %w", p.id, p.coord, asUnavailable(err))
	}
	h.r.counters.resolved.Add(1)
	switch state {
	case txnCommitted:
		return false, t.apply(p)
	case txnPending:
		return true, nil
	}
	return false, t.abort(p)
}

// coordState asks coordinator coord for the state of txn.
func (t *participant) coordState(ctx context.Context, coord, txn string) (string, error) {
	resp, err := callShard(ctx, t.h.r, coord, methodTxnStatus, &txnStatusReq{TxnID: txn}, (*home).handleTxnStatus)
	if err != nil {
		return "", err
	}
	return resp.State, nil
}
