package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Transactions: changes that span several homes (create, unlink, rmdir
// whose child lives on another node than the parent; rename; directory
// rename; drain) run a presumed-abort two-phase commit.
//
//  1. The coordinator (the parent directory's home; for a drain the
//     draining node) records the transaction in memory as pending and
//     sends each participant its part (Txn.Prepare). A participant marks
//     the paths the part changes (flux.go), waits for
//     operations in progress on them, checks the part's preconditions and
//     makes the part durable as a prepared record ("p/<txn>" intent), not
//     yet visible.
//  2. Commit point: the coordinator applies its own changes (for example
//     the new directory entry) in one batch with a durable committed
//     record ("c/<txn>" intent).
//  3. The coordinator tells every participant to commit (Txn.CommitChild);
//     each applies its part in one batch that also deletes its prepared
//     record (a directory re-key then runs forward-only, resumable), and
//     removes its marks. When all have answered, the committed record is
//     deleted.
//
// Any failure before the commit point aborts: the coordinator tells the
// participants (Txn.AbortChild) and forgets the transaction. A participant
// that meets a prepared part (a reader of a marked path, a new operation
// on it, the background resolver, a restart) asks the coordinator
// (Txn.Status): "pending" leaves it (readers see the state before it),
// "committed" applies it, anything else (the coordinator has no record:
// it aborted, or crashed before the commit point) discards it. A
// coordinator keeps its committed record until every participant has
// applied its part, re-sending commits after failures and restarts, so
// "unknown" never hides a commit. If the coordinator cannot be reached,
// readers of the marked paths answer unavailable.

// partTxn is a prepared part held at this node.
type partTxn struct {
	id, coord string
	ops       []txnOp
	marks     []string
	born      time.Time

	mu        sync.Mutex  // serializes prepare, apply and abort
	committed atomic.Bool // the batch is applied (rekeys may remain)
	finished  atomic.Bool
	rekeyed   int64
}

// partRecord is the durable form of a prepared part.
type partRecord struct {
	Coordinator string   `json:"coordinator"`
	Ops         []txnOp  `json:"ops"`
	Marks       []string `json:"marks"`
	Committed   bool     `json:"committed,omitempty"`
}

// coordRecord is the durable committed record of a coordinator.
type coordRecord struct {
	Participants []string `json:"participants"`
}

const (
	partPrefix  = "p/"
	coordPrefix = "c/"
	// txnCommitting is the coordinator's state while its commit batch is
	// being written: Txn.Status waits for the outcome.
	txnCommitting = "committing"
)

// coordTxn is a transaction this node coordinates, in memory.
type coordTxn struct {
	id      string
	mu      sync.Mutex
	state   string
	decided chan struct{}
}

// prepareUnreachable reports a participant that could not be reached to
// prepare its part (the transaction was aborted; a create may place the
// child elsewhere).
type prepareUnreachable struct {
	node string
	err  error
}

func (e *prepareUnreachable) Error() string { return fmt.Sprintf("node %s: %v", e.node, e.err) }
func (e *prepareUnreachable) Unwrap() error { return e.err }

// Crash-injection points of tests (Namespace.hook).
const (
	hookPrepared  = "prepared"  // every part prepared, before the commit point
	hookCommitted = "committed" // after the commit point, before telling participants
)

var errSimulatedCrash = fmt.Errorf("%w: simulated crash", rpc.ErrUnavailable)

// crashAt reports whether a test asked the coordinator to stop dead at
// point (leaving the transaction as a crash would).
func (n *Namespace) crashAt(point, txn string) bool {
	h := n.hook.Load()
	return h != nil && (*h)(point, txn)
}

// errBusy reports a transaction refused because of a conflict; the
// coordinator retries it.
var errBusy = fmt.Errorf("%w: busy: a conflicting change is in progress, try again", rpc.ErrUnavailable)

// newTxnID returns a transaction id unique across this node's restarts.
func (n *Namespace) newTxnID() string {
	return fmt.Sprintf("%s.%s.%d", n.id, n.txnEpoch, n.txnSeq.Add(1))
}

// retryBusy runs fn until it does not fail with errBusy, at most
// Tuning.BusyRetries more times, with a jittered back-off.
func retryBusy[T any](ctx context.Context, n *Namespace, fn func() (T, error)) (T, error) {
	b := backoff.NewJitter(n.tune.BusyBackoffMin, n.tune.BusyBackoffMax)
	for attempt := 0; ; attempt++ {
		v, err := fn()
		if err == nil || !errors.Is(err, errBusy) || attempt >= n.tune.BusyRetries {
			return v, err
		}
		n.counters.busy.Add(1)
		if werr := b.Wait(ctx); werr != nil {
			return v, fmt.Errorf("%w: %w", errBusy, werr)
		}
	}
}

func (p *partTxn) record() []byte {
	b, _ := json.Marshal(partRecord{Coordinator: p.coord, Ops: p.ops, Marks: p.marks, Committed: p.committed.Load()})
	return b
}

// ---- participant side ----

func (n *Namespace) handlePrepare(ctx context.Context, r *txnPrepareReq) (*txnPrepareResp, error) {
	if r.TxnID == "" || r.Coordinator == "" || len(r.TxnID) > 512 {
		return nil, fmt.Errorf("%w: prepare without a transaction id or coordinator", rpc.ErrBadRequest)
	}
	for _, m := range r.Marks {
		if c, err := CleanPath(m); err != nil || c != m {
			return nil, fmt.Errorf("%w: bad mark %q", rpc.ErrBadRequest, m)
		}
	}
	return n.preparePart(ctx, r)
}

// preparePart stages a part at this node (see the package comment above).
func (n *Namespace) preparePart(ctx context.Context, r *txnPrepareReq) (*txnPrepareResp, error) {
	p := &partTxn{id: r.TxnID, coord: r.Coordinator, ops: r.Ops, marks: r.Marks, born: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	n.partMu.Lock()
	if old := n.parts[p.id]; old != nil {
		n.partMu.Unlock()
		return &txnPrepareResp{Rekeyed: old.rekeyed}, nil // a repeated prepare
	}
	n.parts[p.id] = p
	n.partMu.Unlock()
	ok := false
	defer func() {
		if !ok {
			n.removeMarks(p)
			n.partMu.Lock()
			if n.parts[p.id] == p {
				delete(n.parts, p.id)
			}
			n.partMu.Unlock()
			p.finished.Store(true)
		}
	}()
	var wait []chan struct{}
	for attempt := 0; ; attempt++ {
		var conflict *partTxn
		wait, conflict = n.addMarks(p)
		if conflict == nil {
			break
		}
		if attempt >= 2 {
			return &txnPrepareResp{Busy: true}, nil
		}
		pending, err := n.resolvePart(ctx, conflict)
		if err != nil || pending {
			return &txnPrepareResp{Busy: true}, nil
		}
	}
	if !waitAll(ctx, wait, n.tune.StageWait) {
		return &txnPrepareResp{Busy: true}, nil
	}
	busy, err := n.checkOps(ctx, p)
	if err != nil {
		return nil, err
	}
	if busy {
		return &txnPrepareResp{Busy: true}, nil
	}
	var b store.Batch
	b.PutIntent(partPrefix+p.id, p.record())
	if err := n.st.Commit(ctx, &b); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", p.id, err)
	}
	ok = true
	return &txnPrepareResp{Rekeyed: p.rekeyed}, nil
}

// checkOps checks the preconditions of a part's ops against the store.
// busy means the state is not what the coordinator saw (it retries).
func (n *Namespace) checkOps(ctx context.Context, p *partTxn) (busy bool, err error) {
	deleted := map[string]bool{}
	for i := range p.ops {
		op := &p.ops[i]
		switch op.Kind {
		case opPutInode:
			if op.Inode == nil || storeType(op.Inode.Type) == 0 {
				return false, fmt.Errorf("%w: put_inode without a valid inode", rpc.ErrBadRequest)
			}
			if _, err := n.st.GetInode(ctx, op.Path); err == nil {
				return false, fmt.Errorf("%s: %w", op.Path, fs.ErrExist)
			} else if !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
		case opDelInode, opMoveInode:
			ino, err := n.st.GetInode(ctx, op.Path)
			if errors.Is(err, store.ErrNotFound) {
				return true, nil // moved or removed since the coordinator looked
			} else if err != nil {
				return false, err
			}
			if err := typeMismatch(op.Path, op.Type, ino.Type); err != nil {
				return false, err
			}
			if op.EmptyDir && ino.Type == store.TypeDir {
				ents, _, err := n.st.ReadDir(ctx, op.Path, "", 1)
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
				if _, err := n.st.GetInode(ctx, op.New); err == nil {
					return true, nil
				} else if !errors.Is(err, store.ErrNotFound) {
					return false, err
				}
			}
		case opPutEntry, opDelEntry:
			if op.Entry == nil {
				return false, fmt.Errorf("%w: entry op without an entry", rpc.ErrBadRequest)
			}
			dir, err := n.st.GetInode(ctx, op.Path)
			if errors.Is(err, store.ErrNotFound) {
				return true, nil // the directory is not (any more) homed here
			} else if err != nil {
				return false, err
			}
			if dir.Type != store.TypeDir {
				return false, fmt.Errorf("%s: %w", op.Path, rpc.ErrNotDir)
			}
			cur, err := n.st.GetEntry(ctx, op.Path, op.Entry.Name)
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
		case opPutDir, opDelDir:
		case opRekey:
			if op.Path == "/" || op.New == "/" || isUnder(op.New, op.Path) || isUnder(op.Path, op.New) {
				return false, fmt.Errorf("%w: cannot rename %s to %s", rpc.ErrInvalidPath, op.Path, op.New)
			}
			var blocked bool
			err := n.st.ScanInodesUnder(ctx, op.New, func(q string, _ store.Inode) error {
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
			err = n.st.ScanInodesUnder(ctx, op.Path, func(string, store.Inode) error { cnt++; return nil })
			if err != nil {
				return false, err
			}
			p.rekeyed += cnt
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
	case want == rpc.TypeFile && got == store.TypeDir:
		return fmt.Errorf("%s: %w", p, rpc.ErrIsDir)
	case want == rpc.TypeDir && got == store.TypeFile:
		return fmt.Errorf("%s: %w", p, rpc.ErrNotDir)
	}
	return nil
}

func (n *Namespace) handleCommit(ctx context.Context, r *txnEndReq) (*txnEndResp, error) {
	n.partMu.Lock()
	p := n.parts[r.TxnID]
	n.partMu.Unlock()
	if p == nil {
		return &txnEndResp{}, nil // already applied
	}
	if err := n.applyPart(p); err != nil {
		return nil, err
	}
	return &txnEndResp{}, nil
}

func (n *Namespace) handleAbort(ctx context.Context, r *txnEndReq) (*txnEndResp, error) {
	n.partMu.Lock()
	p := n.parts[r.TxnID]
	n.partMu.Unlock()
	if p == nil {
		return &txnEndResp{}, nil
	}
	if err := n.abortPart(p); err != nil {
		return nil, err
	}
	return &txnEndResp{}, nil
}

// applyPart makes a committed part visible (idempotent).
func (n *Namespace) applyPart(p *partTxn) error {
	ctx := n.ctx
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished.Load() {
		return nil
	}
	hasRekey := false
	for i := range p.ops {
		if p.ops[i].Kind == opRekey {
			hasRekey = true
		}
	}
	if !p.committed.Load() {
		var b store.Batch
		var adds, removes []string
		for i := range p.ops {
			op := &p.ops[i]
			switch op.Kind {
			case opPutInode:
				b.PutInode(op.Path, storeInode(op.Inode))
				adds = append(adds, op.Path)
			case opDelInode:
				b.DeleteInode(op.Path)
				removes = append(removes, op.Path)
			case opMoveInode:
				ino, err := n.st.GetInode(ctx, op.Path)
				if err != nil {
					if errors.Is(err, store.ErrNotFound) {
						n.log.Error("commit: moved inode missing", "txn", p.id, "path", op.Path)
						continue
					}
					return err
				}
				ino.Ctime = op.Ctime
				ino.Version++
				b.DeleteInode(op.Path)
				b.PutInode(op.New, ino)
				removes = append(removes, op.Path)
				adds = append(adds, op.New)
			case opPutEntry:
				b.PutEntry(op.Path, storeEntry(op.Entry))
			case opDelEntry:
				b.DeleteEntry(op.Path, op.Entry.Name)
			case opPutDir:
				for j := range op.Entries {
					b.PutEntry(op.Path, storeEntry(&op.Entries[j]))
				}
			case opDelDir:
				after := ""
				for {
					ents, more, err := n.st.ReadDir(ctx, op.Path, after, 4096)
					if err != nil {
						return err
					}
					for _, e := range ents {
						b.DeleteEntry(op.Path, e.Name)
					}
					if !more || len(ents) == 0 {
						break
					}
					after = ents[len(ents)-1].Name
				}
			}
		}
		pid := partPrefix + p.id
		if hasRekey {
			p.committed.Store(true)
			b.PutIntent(pid, p.record())
		} else {
			b.DeleteIntent(pid)
		}
		if err := n.st.Commit(ctx, &b); err != nil {
			p.committed.Store(false)
			return fmt.Errorf("commit %s: %w", p.id, err)
		}
		p.committed.Store(true)
		for _, q := range removes {
			n.localRemove(q)
		}
		for _, q := range adds {
			n.localAdd(q)
		}
	}
	for i := range p.ops {
		if op := &p.ops[i]; op.Kind == opRekey {
			if err := n.rekey(ctx, op.Path, op.New); err != nil {
				return err
			}
		}
	}
	if hasRekey {
		if err := n.st.DeleteIntent(ctx, partPrefix+p.id); err != nil {
			return err
		}
	}
	n.finishPart(p)
	return nil
}

// rekey moves this node's part of a renamed subtree (store.RekeyPrefix),
// keeping the filters in step.
func (n *Namespace) rekey(ctx context.Context, oldP, newP string) error {
	any := false
	err := n.st.ScanInodesUnder(ctx, oldP, func(string, store.Inode) error { any = true; return errStopScan })
	if err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	if !any {
		return nil // nothing here, or already moved before a restart
	}
	err = n.st.RekeyPrefix(ctx, oldP, newP, func(o, nw string) {
		n.localRemove(o)
		n.localAdd(nw)
		n.counters.rekeyed.Add(1)
	})
	if err != nil {
		return fmt.Errorf("rekey %s -> %s: %w", oldP, newP, err)
	}
	return nil
}

// abortPart discards a prepared part (idempotent).
func (n *Namespace) abortPart(p *partTxn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished.Load() {
		return nil
	}
	if p.committed.Load() {
		return fmt.Errorf("abort %s: part already committed", p.id)
	}
	if err := n.st.DeleteIntent(n.ctx, partPrefix+p.id); err != nil {
		return fmt.Errorf("abort %s: %w", p.id, err)
	}
	n.finishPart(p)
	return nil
}

func (n *Namespace) finishPart(p *partTxn) {
	p.finished.Store(true)
	n.removeMarks(p)
	n.partMu.Lock()
	if n.parts[p.id] == p {
		delete(n.parts, p.id)
	}
	n.partMu.Unlock()
}

// resolvePart asks the coordinator how p's transaction ended and applies
// or discards p. pending reports a transaction still undecided.
func (n *Namespace) resolvePart(ctx context.Context, p *partTxn) (pending bool, err error) {
	if p.finished.Load() {
		return false, nil
	}
	if p.committed.Load() {
		return false, n.applyPart(p) // a re-key still running: wait for it
	}
	state, err := n.txnState(ctx, p.coord, p.id)
	if err != nil {
		return false, fmt.Errorf("resolving transaction %s with its coordinator %s: %w", p.id, p.coord, asUnavailable(err))
	}
	n.counters.resolved.Add(1)
	switch state {
	case txnCommitted:
		return false, n.applyPart(p)
	case txnPending:
		return true, nil
	}
	return false, n.abortPart(p)
}

// txnState asks coordinator coord for the state of txn.
func (n *Namespace) txnState(ctx context.Context, coord, txn string) (string, error) {
	resp, err := callNode(ctx, n, coord, methodTxnStatus, &txnStatusReq{TxnID: txn}, n.handleTxnStatus)
	if err != nil {
		return "", err
	}
	return resp.State, nil
}

// ---- coordinator side ----

func (n *Namespace) handleTxnStatus(ctx context.Context, r *txnStatusReq) (*txnStatusResp, error) {
	n.coordMu.Lock()
	t := n.coords[r.TxnID]
	_, redo := n.redo[r.TxnID]
	n.coordMu.Unlock()
	if t != nil {
		t.mu.Lock()
		st, ch := t.state, t.decided
		t.mu.Unlock()
		if st == txnCommitting {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			t.mu.Lock()
			st = t.state
			t.mu.Unlock()
		}
		if st != txnCommitting {
			return &txnStatusResp{State: st}, nil
		}
	}
	if redo {
		return &txnStatusResp{State: txnCommitted}, nil
	}
	if r.TxnID == "" || len(r.TxnID) > 512 {
		return &txnStatusResp{State: txnUnknown}, nil
	}
	if _, err := n.st.GetIntent(ctx, coordPrefix+r.TxnID); err == nil {
		return &txnStatusResp{State: txnCommitted}, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	return &txnStatusResp{State: txnUnknown}, nil
}

// txnPlan is a transaction to run: the parts by participant, and the
// coordinator's own changes written with the committed record.
type txnPlan struct {
	id    string
	parts map[string]*txnPrepareReq
	// local adds the coordinator's own preconditions and changes to the
	// commit batch (may be nil).
	local func(b *store.Batch)
	// afterLocal runs after the commit batch is durable (filter updates
	// for local changes).
	afterLocal func()
	// pre names the participants whose parts are already prepared.
	pre map[string]bool
	// async returns after the commit point without waiting for the
	// participants to apply their parts.
	async bool
}

// newPlan returns an empty plan for transaction txn.
func (n *Namespace) newPlan(txn string) *txnPlan {
	return &txnPlan{id: txn, parts: map[string]*txnPrepareReq{}}
}

// add appends ops and marks to node's part.
func (t *txnPlan) add(node, coord string, marks []string, ops ...txnOp) {
	p := t.parts[node]
	if p == nil {
		p = &txnPrepareReq{TxnID: t.id, Coordinator: coord}
		t.parts[node] = p
	}
	p.Ops = append(p.Ops, ops...)
	for _, m := range marks {
		if !slices.Contains(p.Marks, m) {
			p.Marks = append(p.Marks, m)
		}
	}
}

// runTxn runs plan to its outcome: nil once committed (participants that
// could not be told yet are retried in the background), errBusy on a
// conflict, or the first participant's error.
func (n *Namespace) runTxn(ctx context.Context, plan *txnPlan) (rekeyed int64, err error) {
	return n.finishTxn(ctx, n.beginTxn(plan.id), plan)
}

// beginTxn records a transaction as pending (Txn.Status answers so).
func (n *Namespace) beginTxn(id string) *coordTxn {
	t := &coordTxn{id: id, state: txnPending, decided: make(chan struct{})}
	n.coordMu.Lock()
	n.coords[t.id] = t
	n.coordMu.Unlock()
	return t
}

// finishTxn prepares plan's parts (except those in plan.pre, already
// prepared), then commits or aborts.
func (n *Namespace) finishTxn(ctx context.Context, t *coordTxn, plan *txnPlan) (rekeyed int64, err error) {
	nodes := make([]string, 0, len(plan.parts))
	for id := range plan.parts {
		nodes = append(nodes, id)
	}
	// Phase 1: prepare everywhere at once.
	type result struct {
		resp txnPrepareResp
		err  error
	}
	results := make([]result, len(nodes))
	var wg sync.WaitGroup
	for i, id := range nodes {
		req := plan.parts[id]
		if plan.pre[id] {
			continue
		}
		wg.Go(func() {
			resp, err := callNode(ctx, n, id, methodTxnPrepare, req, n.preparePart)
			if err != nil && id != n.id && isUnavailable(err) {
				err = &prepareUnreachable{node: id, err: err}
			}
			if resp != nil {
				results[i].resp = *resp
			}
			results[i].err = err
		})
	}
	wg.Wait()
	var firstErr error
	busy := false
	for i := range results {
		r := &results[i]
		switch {
		case r.err != nil:
			if firstErr == nil || (errors.Is(firstErr, rpc.ErrUnavailable) && !errors.Is(r.err, rpc.ErrUnavailable)) {
				firstErr = r.err
			}
		case r.resp.Busy:
			busy = true
		default:
			rekeyed += r.resp.Rekeyed
		}
	}
	if firstErr == nil && busy {
		firstErr = errBusy
	}
	if firstErr != nil {
		n.abortTxn(t, nodes)
		return 0, firstErr
	}
	if n.crashAt(hookPrepared, t.id) {
		return 0, errSimulatedCrash
	}
	// Phase 2: the commit point.
	t.mu.Lock()
	t.state = txnCommitting
	t.mu.Unlock()
	var b store.Batch
	if plan.local != nil {
		plan.local(&b)
	}
	rec, _ := json.Marshal(coordRecord{Participants: nodes})
	b.PutIntent(coordPrefix+t.id, rec)
	if err := n.st.Commit(ctx, &b); err != nil {
		n.abortTxn(t, nodes)
		return 0, storeErr(err)
	}
	t.mu.Lock()
	t.state = txnCommitted
	close(t.decided)
	t.mu.Unlock()
	n.counters.committed.Add(1)
	if plan.afterLocal != nil {
		plan.afterLocal()
	}
	if n.crashAt(hookCommitted, t.id) {
		return 0, errSimulatedCrash
	}
	// Phase 3: tell the participants (a detached context: the outcome is
	// decided whatever the client does now). With plan.async the caller
	// does not wait: a reader that meets a part not yet applied resolves
	// it with this node.
	deliver := func() {
		cctx, cancel := context.WithTimeout(n.ctx, n.tune.DeliverTimeout)
		defer cancel()
		if n.commitParts(cctx, t.id, nodes) {
			n.queueCleanup(t.id)
		} else {
			n.coordMu.Lock()
			n.redo[t.id] = &coordRecord{Participants: nodes}
			n.coordMu.Unlock()
		}
		n.coordMu.Lock()
		delete(n.coords, t.id)
		n.coordMu.Unlock()
	}
	if !plan.async || !n.tasks.Go(deliver) {
		deliver()
	}
	return rekeyed, nil
}

// commitParts tells every participant to commit; it reports whether all
// did.
func (n *Namespace) commitParts(ctx context.Context, txn string, nodes []string) bool {
	var failed atomic.Bool
	var wg sync.WaitGroup
	for _, id := range nodes {
		wg.Go(func() {
			if _, err := callNode(ctx, n, id, methodTxnCommit, &txnEndReq{TxnID: txn}, n.handleCommit); err != nil {
				failed.Store(true)
				n.log.Warn("commit not delivered; will retry", "txn", txn, "node", id, "err", err)
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

// abortTxn decides abort and tells the participants (best effort: a
// participant that misses it asks later and hears "unknown").
func (n *Namespace) abortTxn(t *coordTxn, nodes []string) {
	t.mu.Lock()
	t.state = txnAborted
	select {
	case <-t.decided:
	default:
		close(t.decided)
	}
	t.mu.Unlock()
	n.counters.aborted.Add(1)
	ctx, cancel := context.WithTimeout(n.ctx, n.tune.AbortTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range nodes {
		wg.Go(func() {
			if _, err := callNode(ctx, n, id, methodTxnAbort, &txnEndReq{TxnID: t.id}, n.handleAbort); err != nil {
				n.log.Debug("abort not delivered", "txn", t.id, "node", id, "err", err)
			}
		})
	}
	wg.Wait()
	n.coordMu.Lock()
	delete(n.coords, t.id)
	n.coordMu.Unlock()
}

// storeErr maps store precondition errors to the namespace's errors.
func storeErr(err error) error {
	switch {
	case errors.Is(err, store.ErrNotEmpty):
		return fmt.Errorf("%w: %w", rpc.ErrNotEmpty, err)
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%w: %w", errBusy, err)
	}
	return err
}

// queueCleanup schedules the deletion of a coordinator's committed record.
func (n *Namespace) queueCleanup(id string) {
	select {
	case n.cleanup <- id:
	default:
		// Queue full: delete inline.
		if err := n.st.DeleteIntent(n.ctx, coordPrefix+id); err != nil {
			n.log.Warn("deleting committed record", "txn", id, "err", err)
		}
	}
}

// cleanupLoop deletes committed records in batches.
func (n *Namespace) cleanupLoop() {
	for {
		var ids []string
		select {
		case id := <-n.cleanup:
			ids = append(ids, id)
		case <-n.ctx.Done():
			return
		}
	more:
		for len(ids) < 512 {
			select {
			case id := <-n.cleanup:
				ids = append(ids, id)
			default:
				break more
			}
		}
		var b store.Batch
		for _, id := range ids {
			b.DeleteIntent(coordPrefix + id)
		}
		if err := n.st.Commit(n.ctx, &b); err != nil {
			// Left for the next start: redone (commit is idempotent).
			n.log.Debug("deleting committed records", "n", len(ids), "err", err)
		}
	}
}

// ---- start and background resolution ----

// loadTxns loads prepared parts (marking their paths) and committed
// coordinator records.
func (n *Namespace) loadTxns(ctx context.Context) error {
	ins, err := n.st.ListIntents(ctx)
	if err != nil {
		return err
	}
	for _, in := range ins {
		switch {
		case strings.HasPrefix(in.ID, partPrefix):
			var rec partRecord
			if err := json.Unmarshal(in.Payload, &rec); err != nil {
				n.log.Error("corrupt prepared record; dropped", "id", in.ID, "err", err)
				continue
			}
			p := &partTxn{
				id: in.ID[len(partPrefix):], coord: rec.Coordinator, ops: rec.Ops, marks: rec.Marks,
				born: time.Unix(0, in.Created),
			}
			p.committed.Store(rec.Committed)
			n.parts[p.id] = p
			n.forceMarks(p)
		case strings.HasPrefix(in.ID, coordPrefix):
			var rec coordRecord
			if err := json.Unmarshal(in.Payload, &rec); err != nil {
				n.log.Error("corrupt coordinator record; dropped", "id", in.ID, "err", err)
				continue
			}
			n.redo[in.ID[len(coordPrefix):]] = &rec
		}
	}
	return nil
}

// finishCommittedParts completes parts whose batch was applied before a
// restart (their directory re-keys).
func (n *Namespace) finishCommittedParts(ctx context.Context) error {
	n.partMu.Lock()
	var todo []*partTxn
	for _, p := range n.parts {
		if p.committed.Load() {
			todo = append(todo, p)
		}
	}
	n.partMu.Unlock()
	for _, p := range todo {
		if err := n.applyPart(p); err != nil {
			return err
		}
	}
	return nil
}

// resolveTxns re-sends commits of committed transactions and resolves
// prepared parts that nobody has resolved for a while.
func (n *Namespace) resolveTxns(ctx context.Context) {
	n.coordMu.Lock()
	redo := make(map[string]*coordRecord, len(n.redo))
	for id, r := range n.redo {
		redo[id] = r
	}
	n.coordMu.Unlock()
	for id, r := range redo {
		cctx, cancel := context.WithTimeout(ctx, n.tune.DeliverTimeout)
		ok := n.commitParts(cctx, id, r.Participants)
		cancel()
		if ok {
			if err := n.st.DeleteIntent(ctx, coordPrefix+id); err == nil {
				n.coordMu.Lock()
				delete(n.redo, id)
				n.coordMu.Unlock()
			}
		}
	}
	n.partMu.Lock()
	var stale []*partTxn
	for _, p := range n.parts {
		if time.Since(p.born) > n.tune.ResolveAfter {
			stale = append(stale, p)
		}
	}
	n.partMu.Unlock()
	for _, p := range stale {
		cctx, cancel := context.WithTimeout(ctx, n.tune.PeerTimeout)
		if _, err := n.resolvePart(cctx, p); err != nil {
			n.log.Debug("prepared part unresolved", "txn", p.id, "coordinator", p.coord, "err", err)
		}
		cancel()
	}
}

// Pending returns the number of prepared parts held here, transactions
// this node coordinates that are in progress, and committed transactions
// whose participants have not all been told yet.
func (n *Namespace) Pending() (parts, coords, redo int) {
	n.partMu.Lock()
	parts = len(n.parts)
	n.partMu.Unlock()
	n.coordMu.Lock()
	coords, redo = len(n.coords), len(n.redo)
	n.coordMu.Unlock()
	return
}
