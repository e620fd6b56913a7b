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
	push  pushState // propagation of this shard's filters (filters.go)
	files dirFiles  // files placed with their directory (placement.go)

	// transactions (txn.go, flux.go)
	flux    fluxTable
	locks   keyLocks
	coordMu sync.Mutex
	coords  map[string]*coordTxn
	redo    map[string]*coordRecord // committed, some participant not yet told
	partMu  sync.Mutex
	parts   map[string]*partTxn
	txnSeq  atomic.Uint64
	cleanup chan string // coordinator records to delete

	ctx    context.Context // ends when the node stops leading the shard
	cancel context.CancelFunc
	tasks  tasks.Group
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
		lru:     routing.NewLRU(n.rt.LRUEntries, n.lruGeo),
		coords:  make(map[string]*coordTxn),
		redo:    make(map[string]*coordRecord),
		parts:   make(map[string]*partTxn),
		cleanup: make(chan string, 4096),
	}
	h.flux.init()
	h.push.init()
	h.ctx, h.cancel = context.WithCancel(n.ctx)
	return h
}

// start loads the shard's transactions (marking the paths of prepared
// parts), finishes the parts whose batch was applied before a leader
// change (their directory re-keys), creates "/" if this is the root shard
// and "/" is missing, and starts the background work of the shard.
func (h *home) start(ctx context.Context) error {
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
	h.partMu.Lock()
	defer h.partMu.Unlock()
	return len(h.parts)
}

// apply commits b in the shard's log.
func (h *home) apply(ctx context.Context, b *store.Batch) error {
	return h.rep.Apply(ctx, b)
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
	ino := store.Inode{Type: store.TypeDir, Mode: 0o755, Atime: now, Mtime: now, Ctime: now, Nlink: 2, Version: 1}
	var b store.Batch
	b.RequireInodeAbsent("/")
	b.PutInode("/", ino)
	if err := h.apply(ctx, &b); err != nil && !errors.Is(err, store.ErrExists) {
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
