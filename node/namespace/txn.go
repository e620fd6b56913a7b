package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// stub is what a busy prepare found at a removed name (txnPrepareResp.Stub).
	stub *stubRef
	// rv holds the client cache's leases on the inodes the part changes
	// revoked from its prepare until it is applied or discarded
	// (leases.go), so that a commit acknowledged before this node applies
	// the part is never hidden by a cached inode.
	rv        *revocation
	resMu     sync.Mutex
	resolving *resolution // the resolution in progress (participant.go)
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
	// txnInDoubt is the coordinator's state when its commit batch was
	// appended but leadership was lost before Raft decided: Txn.Status
	// answers from the store after a leadership check (which this node
	// then fails: the new leader answers).
	txnInDoubt = "in-doubt"
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
	hookPrepared   = "prepared"   // every part prepared, before the commit point
	hookCommitting = "committing" // the commit point begun (participants asking wait); a pause point, not a crash
	hookCommitted  = "committed"  // after the commit point, before telling participants
)

var errSimulatedCrash = fmt.Errorf("%w: simulated crash", rpc.ErrUnavailable)

// crashAt reports whether a test asked the coordinator to stop dead at
// point (leaving the transaction as a crash would).
func (h *home) crashAt(point, txn string) bool {
	hk := h.r.hook.Load()
	return hk != nil && (*hk)(point, txn)
}

// errBusy reports a transaction refused because of a conflict; the
// coordinator retries it.
var errBusy = fmt.Errorf("%w: busy: a conflicting change is in progress, try again", rpc.ErrUnavailable)

// newTxnID returns a transaction id unique across this node's restarts.
//
// A transaction id is "<shard>.<term>.<seq>": the coordinator shard, the
// Raft term of the leadership that began it and a sequence number, so that
// ids never repeat across leaderships.
func (h *home) newTxnID() string {
	return fmt.Sprintf("%s.%d.%d", h.id, h.term, h.txnSeq.Add(1))
}

// retryBusy runs fn until it does not fail with errBusy, at most
// Tuning.BusyRetries more times, with a jittered back-off.
func retryBusy[T any](ctx context.Context, h *home, fn func() (T, error)) (T, error) {
	n := h.r
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

// ---- coordinator side ----

func (h *home) handleTxnStatus(ctx context.Context, r *txnStatusReq) (*txnStatusResp, error) {
	h.coordMu.Lock()
	t := h.coords[r.TxnID]
	_, redo := h.redo[r.TxnID]
	h.coordMu.Unlock()
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
		if st != txnCommitting && st != txnInDoubt {
			return &txnStatusResp{State: st}, nil
		}
	}
	if redo {
		return &txnStatusResp{State: txnCommitted}, nil
	}
	if r.TxnID == "" || len(r.TxnID) > 512 {
		return &txnStatusResp{State: txnUnknown}, nil
	}
	// No record in memory: the answer comes from the store, which must be
	// this shard's current state (a replica that lost its leadership
	// without knowing it must not answer "unknown" for a transaction a new
	// leader committed).
	if err := h.rep.VerifyLeader(ctx); err != nil {
		return nil, err
	}
	if _, err := h.st.GetIntent(ctx, coordPrefix+r.TxnID); err == nil {
		return &txnStatusResp{State: txnCommitted}, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	// Not committed, and no leadership of this shard may commit it any
	// more: one begun in an earlier term lost its commit point with its
	// leader (finishTxn), one begun in this term is not in progress.
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
	// participants to apply their parts, or after waiting up to wait
	// for them.
	async bool
	wait  time.Duration
}

// newPlan returns an empty plan for transaction txn.
func (h *home) newPlan(txn string) *txnPlan {
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
func (h *home) runTxn(ctx context.Context, plan *txnPlan) (rekeyed int64, err error) {
	return h.finishTxn(ctx, h.beginTxn(plan.id), plan)
}

// beginTxn records a transaction as pending (Txn.Status answers so).
func (h *home) beginTxn(id string) *coordTxn {
	t := &coordTxn{id: id, state: txnPending, decided: make(chan struct{})}
	h.coordMu.Lock()
	h.coords[t.id] = t
	h.coordMu.Unlock()
	return t
}

// finishTxn prepares plan's parts (except those in plan.pre, already
// prepared), then commits or aborts: the commit point here, then the
// participants told.
func (h *home) finishTxn(ctx context.Context, t *coordTxn, plan *txnPlan) (rekeyed int64, err error) {
	nodes := make([]string, 0, len(plan.parts))
	for id := range plan.parts {
		nodes = append(nodes, id)
	}
	// Phase 1: prepare everywhere at once.
	rekeyed, err = h.prepareParts(ctx, plan, nodes)
	if err != nil {
		h.abortTxn(t, nodes)
		return 0, err
	}
	if h.crashAt(hookPrepared, t.id) {
		return 0, errSimulatedCrash
	}
	// Phase 2: the commit point.
	if err := h.commitPoint(t, plan, nodes); err != nil {
		return 0, err
	}
	if h.crashAt(hookCommitted, t.id) {
		return 0, errSimulatedCrash
	}
	// Phase 3: tell the participants.
	h.deliverCommit(ctx, t, plan, nodes)
	return rekeyed, nil
}

// prepareParts prepares the parts of plan at nodes, all at once (except
// those in plan.pre, already prepared). It returns the number of inodes
// the parts re-keyed; or an error: a participant's (the first, preferring
// any other to unavailability), else errBusy when one met a conflict.
func (h *home) prepareParts(ctx context.Context, plan *txnPlan, nodes []string) (rekeyed int64, err error) {
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
			resp, err := callShard(ctx, h.r, id, methodTxnPrepare, req, (*home).preparePart)
			if err != nil && id != h.id && isUnavailable(err) {
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
	var stub *stubRef
	for i := range results {
		r := &results[i]
		switch {
		case r.err != nil:
			if firstErr == nil || (errors.Is(firstErr, rpc.ErrUnavailable) && !errors.Is(r.err, rpc.ErrUnavailable)) {
				firstErr = r.err
			}
		case r.resp.Busy:
			busy = true
			if r.resp.Stub != nil {
				stub = r.resp.Stub
			}
		default:
			rekeyed += r.resp.Rekeyed
		}
	}
	if firstErr == nil && busy {
		firstErr = errBusy
		if stub != nil {
			firstErr = &stubFound{ref: stub}
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return rekeyed, nil
}

// commitPoint commits t here: plan's own changes with the committed
// record naming nodes, in one batch, then plan.afterLocal. On an error
// it aborts t, except when the outcome is unknown (then t is in doubt).
func (h *home) commitPoint(t *coordTxn, plan *txnPlan, nodes []string) error {
	t.mu.Lock()
	t.state = txnCommitting
	t.mu.Unlock()
	h.crashAt(hookCommitting, t.id) // (a test may hold the commit point here; it cannot crash here)
	var b store.Batch
	if plan.local != nil {
		plan.local(&b)
	}
	rec, _ := json.Marshal(coordRecord{Participants: nodes})
	b.PutIntent(coordPrefix+t.id, rec)
	// The commit point waits for Raft's verdict whatever the client does
	// (h.ctx ends only when this node stops leading the shard): a
	// participant asking meanwhile is told to wait (txnCommitting).
	if err := h.apply(h.ctx, &b); err != nil {
		if errors.Is(err, rpc.ErrOutcomeUnknown) {
			// Appended, then leadership was lost: the next leader decides
			// (its store has the committed record or never will), and
			// participants ask it. Nothing is aborted here.
			t.mu.Lock()
			t.state = txnInDoubt
			close(t.decided)
			t.mu.Unlock()
			return fmt.Errorf("commit point of %s: %w", t.id, err)
		}
		h.abortTxn(t, nodes)
		return storeErr(err)
	}
	t.mu.Lock()
	t.state = txnCommitted
	close(t.decided)
	t.mu.Unlock()
	h.r.counters.committed.Add(1)
	if plan.afterLocal != nil {
		plan.afterLocal()
	}
	return nil
}

// deliverCommit tells the participants nodes that t committed (a
// detached context: the outcome is decided whatever the client does now);
// those it could not tell are retried in the background. With plan.async
// the caller waits at most plan.wait (or until ctx ends): a reader that
// meets a part not yet applied resolves it with this node.
func (h *home) deliverCommit(ctx context.Context, t *coordTxn, plan *txnPlan, nodes []string) {
	deliver := func() {
		cctx, cancel := context.WithTimeout(h.ctx, h.r.tune.DeliverTimeout)
		defer cancel()
		if h.commitParts(cctx, t.id, nodes) {
			h.queueCleanup(t.id)
		} else {
			h.coordMu.Lock()
			h.redo[t.id] = &coordRecord{Participants: nodes}
			h.coordMu.Unlock()
		}
		h.coordMu.Lock()
		delete(h.coords, t.id)
		h.coordMu.Unlock()
	}
	delivered := make(chan struct{})
	if !plan.async || !h.tasks.Go(func() { defer close(delivered); deliver() }) {
		deliver()
		return
	}
	if plan.wait > 0 {
		timer := time.NewTimer(plan.wait)
		defer timer.Stop()
		select {
		case <-delivered:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}

// commitParts tells every participant to commit; it reports whether all
// did.
func (h *home) commitParts(ctx context.Context, txn string, nodes []string) bool {
	var failed atomic.Bool
	var wg sync.WaitGroup
	for _, id := range nodes {
		wg.Go(func() {
			if _, err := callShard(ctx, h.r, id, methodTxnCommit, &txnEndReq{TxnID: txn}, (*home).handleCommit); err != nil {
				failed.Store(true)
				h.log.Warn("commit not delivered; will retry", "txn", txn, "node", id, "err", err)
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

// abortTxn decides abort and tells the participants (best effort: a
// participant that misses it asks later and hears "unknown").
func (h *home) abortTxn(t *coordTxn, nodes []string) {
	t.mu.Lock()
	t.state = txnAborted
	select {
	case <-t.decided:
	default:
		close(t.decided)
	}
	t.mu.Unlock()
	h.r.counters.aborted.Add(1)
	ctx, cancel := context.WithTimeout(h.ctx, h.r.tune.AbortTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range nodes {
		wg.Go(func() {
			if _, err := callShard(ctx, h.r, id, methodTxnAbort, &txnEndReq{TxnID: t.id}, (*home).handleAbort); err != nil {
				h.log.Debug("abort not delivered", "txn", t.id, "node", id, "err", err)
			}
		})
	}
	wg.Wait()
	h.coordMu.Lock()
	delete(h.coords, t.id)
	h.coordMu.Unlock()
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
func (h *home) queueCleanup(id string) {
	select {
	case h.cleanup <- id:
	default:
		// Queue full: delete inline.
		var b store.Batch
		b.DeleteIntent(coordPrefix + id)
		if err := h.apply(h.ctx, &b); err != nil {
			h.log.Warn("deleting committed record", "txn", id, "err", err)
		}
	}
}

// cleanupLoop deletes committed records in batches.
func (h *home) cleanupLoop() {
	for {
		var ids []string
		select {
		case id := <-h.cleanup:
			ids = append(ids, id)
		case <-h.ctx.Done():
			return
		}
	more:
		for len(ids) < 512 {
			select {
			case id := <-h.cleanup:
				ids = append(ids, id)
			default:
				break more
			}
		}
		var b store.Batch
		for _, id := range ids {
			b.DeleteIntent(coordPrefix + id)
		}
		if err := h.apply(h.ctx, &b); err != nil {
			// Left for the next start: redone (commit is idempotent).
			h.log.Debug("deleting committed records", "n", len(ids), "err", err)
		}
	}
}

// ---- start and background resolution ----

// loadTxns loads prepared parts (marking their paths) and committed
// coordinator records (not the shard's other intents, such as trash
// records, of which there may be many).
func (h *home) loadTxns(ctx context.Context) error {
	var ins []store.Intent
	for _, pfx := range []string{partPrefix, coordPrefix} {
		some, err := h.st.ListIntentsPrefix(ctx, pfx, "", 0)
		if err != nil {
			return err
		}
		ins = append(ins, some...)
	}
	for _, in := range ins {
		switch {
		case strings.HasPrefix(in.ID, partPrefix):
			var rec partRecord
			if err := json.Unmarshal(in.Payload, &rec); err != nil {
				h.log.Error("corrupt prepared record; dropped", "id", in.ID, "err", err)
				continue
			}
			p := &partTxn{
				id: in.ID[len(partPrefix):], coord: rec.Coordinator, ops: rec.Ops, marks: rec.Marks,
				born: time.Unix(0, in.Created),
			}
			p.committed.Store(rec.Committed)
			h.txns.byID[p.id] = p
			h.txns.forceMarks(p)
		case strings.HasPrefix(in.ID, coordPrefix):
			var rec coordRecord
			if err := json.Unmarshal(in.Payload, &rec); err != nil {
				h.log.Error("corrupt coordinator record; dropped", "id", in.ID, "err", err)
				continue
			}
			h.redo[in.ID[len(coordPrefix):]] = &rec
		}
	}
	return nil
}

// finishCommittedParts completes parts whose batch was applied before a
// restart (their directory re-keys).
func (h *home) finishCommittedParts(ctx context.Context) error {
	h.txns.mu.Lock()
	var todo []*partTxn
	for _, p := range h.txns.byID {
		if p.committed.Load() {
			todo = append(todo, p)
		}
	}
	h.txns.mu.Unlock()
	for _, p := range todo {
		if err := h.txns.apply(p); err != nil {
			return err
		}
	}
	return nil
}

// resolveTxns re-sends commits of committed transactions and resolves
// prepared parts that nobody has resolved for a while.
func (h *home) resolveTxns(ctx context.Context) {
	h.coordMu.Lock()
	redo := make(map[string]*coordRecord, len(h.redo))
	for id, r := range h.redo {
		redo[id] = r
	}
	h.coordMu.Unlock()
	for id, r := range redo {
		cctx, cancel := context.WithTimeout(ctx, h.r.tune.DeliverTimeout)
		ok := h.commitParts(cctx, id, r.Participants)
		cancel()
		if ok {
			var b store.Batch
			b.DeleteIntent(coordPrefix + id)
			if err := h.apply(ctx, &b); err == nil {
				h.coordMu.Lock()
				delete(h.redo, id)
				h.coordMu.Unlock()
			}
		}
	}
	h.txns.mu.Lock()
	var stale []*partTxn
	for _, p := range h.txns.byID {
		if time.Since(p.born) > h.r.tune.ResolveAfter {
			stale = append(stale, p)
		}
	}
	h.txns.mu.Unlock()
	for _, p := range stale {
		cctx, cancel := context.WithTimeout(ctx, h.r.tune.PeerTimeout)
		if _, err := h.txns.await(cctx, p); err != nil {
			h.log.Debug("prepared part unresolved", "txn", p.id, "coordinator", p.coord, "err", err)
		}
		cancel()
	}
}

// Pending returns the number of prepared parts held here, transactions
// this node coordinates that are in progress, and committed transactions
// whose participants have not all been told yet.
func (h *home) Pending() (parts, coords, redo int) {
	h.txns.mu.Lock()
	parts = len(h.txns.byID)
	h.txns.mu.Unlock()
	h.coordMu.Lock()
	coords, redo = len(h.coords), len(h.redo)
	h.coordMu.Unlock()
	return
}

// Pending returns, over the shards this node leads, the number of prepared
// parts held, of transactions in progress, and of committed transactions
// whose participants have not all been told yet.
func (n *Namespace) Pending() (parts, coords, redo int) {
	for _, h := range n.ledHomes() {
		p, c, r := h.Pending()
		parts, coords, redo = parts+p, coords+c, redo+r
	}
	return parts, coords, redo
}
