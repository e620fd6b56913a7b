package namespace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// home is the home logic of one shard this node leads (docs/design.md,
// "Replicated shards"): the operations on the paths the shard homes, the
// transactions it coordinates or takes part in, the paths in flux, and the
// shard's LRU list. It lives from Lead to Unlead; its in-memory state is
// rebuilt from the shard's store at every Lead, so a new leader finishes
// what the last one started. Every write goes through rep (the shard's
// Raft log).
type home struct {
	r    *Namespace // this node's namespace: routing, peers, counters
	id   string     // the shard
	rep  Replica
	st   *store.Store
	log  *slog.Logger
	term uint64 // the Raft term of this leadership

	lruMu sync.Mutex
	lru   *routing.LRU
	freq  *routing.FrequencyLRU // admission by frequency (lru is its list); nil: every use admits
	push  pushState             // propagation of this shard's filters (filters.go)
	files dirFiles              // files placed with their directory (placement.go)

	// transactions: those it takes part in (participant.go, flux.go),
	// which reads wait for through inFlight only, and those it
	// coordinates (txn.go)
	txns     participant
	inFlight inFlight // &txns, as reads see it (read.go)
	locks    keyLocks
	coordMu  sync.Mutex
	coords   map[string]*coordTxn
	redo     map[string]*coordRecord // committed, some participant not yet told
	txnSeq   atomic.Uint64
	cleanup  chan string // coordinator records to delete
	ids      idBlock     // inode ids for the inodes it creates (ids.go)
	// linksCounted is set once countLinks finished (links.go; tests).
	linksCounted atomic.Bool
	// trashPending is the number of objects in the shard's trash after
	// the last round of its collection (trash.go).
	trashPending atomic.Int64
	// holds are the open files' holds on this shard's inodes (holds.go).
	holds holdTable

	ctx    context.Context // ends when the node stops leading the shard
	cancel context.CancelFunc
	tasks  tasks.Group
	// led is when this leadership began; writable is when the leases an
	// earlier leader of the shard may have granted have all expired:
	// writes wait for it (leases.go).
	led, writable time.Time
	// gate holds requests back while the shard's leadership moves
	// (handover.go).
	gate moveGate
}

// newHome returns the home of the shard rep leads, not started.
func newHome(n *Namespace, rep Replica) *home {
	h := &home{
		r:       n,
		id:      rep.Shard(),
		rep:     rep,
		st:      rep.Store(),
		log:     n.log.With("shard", rep.Shard()),
		term:    rep.Term(),
		coords:  make(map[string]*coordTxn),
		redo:    make(map[string]*coordRecord),
		cleanup: make(chan string, 4096),
	}
	if n.rt.L1Admission == L1AdmitFrequency {
		h.freq = routing.NewFrequencyLRU(n.rt.LRUEntries, n.lruGeo)
		h.lru = h.freq.LRU()
	} else {
		h.lru = routing.NewLRU(n.rt.LRUEntries, n.lruGeo)
	}
	h.led = time.Now()
	h.writable = h.led.Add(n.leases.ttl)
	h.txns.init(h)
	h.inFlight = &h.txns
	h.push.init()
	h.ctx, h.cancel = context.WithCancel(n.ctx)
	return h
}

// start loads the shard's transactions (marking the paths of prepared
// parts), finishes the parts whose batch was applied before a leader
// change (their directory re-keys), creates "/" if this is the root shard
// and "/" is missing, and starts the background work of the shard.
func (h *home) start(ctx context.Context) error {
	if h.leasesClearBefore(ctx) {
		// A planned move from the previous term's leader, which left no
		// lease valid (handover.go): no wait before the first writes.
		h.writable = h.led
	}
	if err := h.loadTxns(ctx); err != nil {
		return fmt.Errorf("load transactions: %w", err)
	}
	if err := h.finishCommittedParts(ctx); err != nil {
		return fmt.Errorf("finish committed parts: %w", err)
	}
	if err := h.ensureRoot(ctx); err != nil {
		return err
	}
	h.tasks.Go(h.cleanupLoop)
	h.tasks.Go(h.resolveLoop)
	h.tasks.Go(h.numberLegacy)
	h.tasks.Go(h.countLinks)
	h.tasks.Go(h.trashLoop)
	return nil
}

// stop ends the home's goroutines and makes its operations in progress
// fail (their writes are refused by the replica once it no longer leads).
func (h *home) stop() {
	h.tasks.Close()
	h.cancel()
	h.tasks.Wait()
}

// preparedCount returns the number of prepared parts held.
func (h *home) preparedCount() int {
	return h.txns.count()
}

// apply commits b in the shard's log, once the clients caching the
// paths it changes (inodes, and names whose entry it puts or deletes)
// have dropped them (leases.go).
func (h *home) apply(ctx context.Context, b *store.Batch) error {
	rv, err := h.revoke(ctx, b.ChangedPaths(), nil, true)
	if err != nil {
		return err
	}
	defer rv.end()
	return h.command(ctx, func(ctx context.Context) error { return h.rep.Apply(ctx, b) })
}

// participant.apply's writes: the batch of a prepared transaction part, and its
// subtree changes. Their paths have been in flux since the part's
// prepare revoked the leases on them, so no leader of the shard has
// granted one since: they need not wait for an earlier leader's leases
// (which would hold up finishing committed parts when a leadership
// starts).

// applyMarked is apply for a prepared part's batch.
func (h *home) applyMarked(ctx context.Context, b *store.Batch) error {
	rv, err := h.revoke(ctx, b.ChangedPaths(), nil, false)
	if err != nil {
		return err
	}
	defer rv.end()
	return h.command(ctx, func(ctx context.Context) error { return h.rep.Apply(ctx, b) })
}

// rekey moves a subtree through the shard's log (a prepared part's).
func (h *home) rekey(ctx context.Context, oldPrefix, newPrefix string, chain []store.AncestorCode) error {
	rv, err := h.revoke(ctx, nil, []string{oldPrefix, newPrefix}, false)
	if err != nil {
		return err
	}
	defer rv.end()
	return h.command(ctx, func(ctx context.Context) error { return h.rep.Rekey(ctx, oldPrefix, newPrefix, chain) })
}

// recode rewrites a subtree's ancestor codes through the shard's log (a
// prepared part's).
func (h *home) recode(ctx context.Context, root string, code *store.AncestorCode) error {
	rv, err := h.revoke(ctx, nil, []string{root}, false)
	if err != nil {
		return err
	}
	defer rv.end()
	return h.command(ctx, func(ctx context.Context) error { return h.rep.Recode(ctx, root, code) })
}

// revoke revokes the client cache's leases on paths and under prefixes
// before a write (leaseTable.beginWrite). With grace, a leader's first
// writes wait until every lease its predecessors may have granted has
// expired.
func (h *home) revoke(ctx context.Context, paths, prefixes []string, grace bool) (*revocation, error) {
	if h.r.leases.ttl <= 0 || (len(paths) == 0 && len(prefixes) == 0) {
		return nil, nil
	}
	if wait := time.Until(h.writable); grace && wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the leases of the previous leader to expire: %w: %w", rpc.ErrUnavailable, ctx.Err())
		}
	}
	rv, err := h.r.leases.beginWrite(ctx, paths, prefixes)
	if err != nil {
		return nil, fmt.Errorf("revoking cache leases: %w: %w", rpc.ErrUnavailable, err)
	}
	return rv, nil
}

// ensureRoot creates "/" if this is the root shard and it is missing.
func (h *home) ensureRoot(ctx context.Context) error {
	if h.r.dir.RootShard() != h.id {
		return nil
	}
	if _, err := h.st.GetInode(ctx, "/"); err == nil || !errors.Is(err, store.ErrNotFound) {
		return err
	}
	now := time.Now().UnixNano()
	ino := store.Inode{Type: store.TypeDir, Mode: 0o755, Atime: now, Mtime: now, Ctime: now, Nlink: 2, Version: 1, ID: RootID}
	var b store.Batch
	b.RequireInodeAbsent("/")
	b.PutInode("/", ino)
	if err := h.command(ctx, func(ctx context.Context) error { return h.rep.Apply(ctx, &b) }); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("create /: %w", err)
	}
	h.log.Info("created /")
	return nil
}

// resolveLoop resolves the shard's transactions every ResolveInterval:
// re-sends commits not yet delivered, resolves prepared parts that nobody
// has resolved for a while.
func (h *home) resolveLoop() {
	t := time.NewTicker(h.r.tune.ResolveInterval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.resolveTxns(h.ctx)
		}
	}
}
