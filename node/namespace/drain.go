package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// MaxDrainEntries bounds the entries of one directory that Drain moves in
// one transaction (the prepared record must fit in one store value).
const MaxDrainEntries = 8000

// Drain moves every path homed here to other nodes (for `ghba leave`), so
// that nothing is lost when this node goes: each path is one transaction
// coordinated by this node, in which the target stores the inode (and a
// directory's entries), the parent directory's home points its entry at
// the target, and this node deletes its copy. From the start of Drain this
// node takes no new homes. Drain returns when nothing is homed here and
// every transaction this node takes part in is settled, or with an error
// naming how many paths could not be moved (they stay here, intact).
// Every other node that homes a parent of a moved path must be up. It
// returns the number of paths moved. If this node homed "/", RootMovedTo
// names its new home afterwards.
func (n *Namespace) Drain(ctx context.Context) (int64, error) {
	n.draining.Store(true)
	var (
		res     struct{ Moved int64 }
		mu      sync.Mutex
		failed  = map[string]error{}
		firstEr error
	)
	for {
		var batch []string
		err := n.st.ScanInodes(ctx, func(p string, _ store.Inode) error {
			mu.Lock()
			_, bad := failed[p]
			mu.Unlock()
			if !bad {
				batch = append(batch, p)
			}
			if len(batch) >= 256 {
				return errStopScan
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return res.Moved, fmt.Errorf("drain: %w", err)
		}
		if len(batch) == 0 {
			break
		}
		tasks.ForEach(len(batch), 8, func(i int) {
			p := batch[i]
			to, err := n.movePath(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[p] = err
				if firstEr == nil {
					firstEr = fmt.Errorf("%s: %w", p, err)
				}
				return
			}
			if to != "" {
				res.Moved++
				n.counters.drained.Add(1)
				if p == "/" {
					n.rootMovedTo.Store(&to)
				}
			}
		})
		if err := ctx.Err(); err != nil {
			return res.Moved, fmt.Errorf("drain: %w", err)
		}
	}
	// Settle the transactions this node takes part in.
	for {
		parts, coords, redo := n.Pending()
		if parts+coords+redo == 0 {
			break
		}
		n.resolveTxns(ctx)
		if err := backoff.Sleep(ctx, n.tune.DrainPoll); err != nil {
			return res.Moved, fmt.Errorf("drain: waiting for %d prepared parts and %d undelivered commits: %w", parts, redo, err)
		}
	}
	n.tasks.Go(n.SyncFilters) // tell the others now rather than at the next interval
	if len(failed) > 0 {
		return res.Moved, fmt.Errorf("drain: %d paths could not be moved; first: %w", len(failed), firstEr)
	}
	n.log.Info("drained", "moved", res.Moved, "root_moved_to", n.RootMovedTo())
	return res.Moved, nil
}

// RootMovedTo returns the node that received "/" when Drain moved it away
// from this node, or "". The cluster layer should record it as the new
// root home (Directory.RootHome); until then lookups of "/" find it by
// broadcast.
func (n *Namespace) RootMovedTo() string {
	if p := n.rootMovedTo.Load(); p != nil {
		return *p
	}
	return ""
}

// movePath moves p (homed here) to another node; it returns the target, or
// "" if p is no longer here.
func (n *Namespace) movePath(ctx context.Context, p string) (string, error) {
	return retryBusy(ctx, n, func() (string, error) { return n.movePathOnce(ctx, p) })
}

func (n *Namespace) movePathOnce(ctx context.Context, p string) (string, error) {
	ino0, err := n.st.GetInode(ctx, p)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	target := n.drainTarget(ctx)
	if target == "" {
		return "", fmt.Errorf("%w: no live node takes new homes", rpc.ErrUnavailable)
	}
	typ := typeString(ino0.Type)
	txn := n.newTxnID()
	t := n.beginTxn(txn)
	// Stage this node's part first: from then on p's inode and entries
	// cannot change, and they can be copied.
	self := &txnPrepareReq{TxnID: txn, Coordinator: n.id, Marks: []string{p}}
	if ino0.Type == store.TypeDir {
		self.Ops = append(self.Ops, txnOp{Kind: opDelDir, Path: p})
	}
	self.Ops = append(self.Ops, txnOp{Kind: opDelInode, Path: p, Type: typ})
	resp, err := n.preparePart(ctx, self)
	if err == nil && resp.Busy {
		err = errBusy
	}
	if err != nil {
		n.abortTxn(t, []string{n.id})
		if errors.Is(err, errBusy) {
			return "", err
		}
		if isNotFoundOrBusy(err) {
			return "", nil
		}
		return "", err
	}
	fail := func(err error) (string, error) {
		n.abortTxn(t, []string{n.id})
		return "", err
	}
	ino, err := n.st.GetInode(ctx, p)
	if err != nil {
		return fail(err)
	}
	plan := n.newPlan(txn)
	plan.parts[n.id], plan.pre = self, map[string]bool{n.id: true}
	w := wireInode(p, target, &ino)
	plan.add(target, n.id, []string{p}, txnOp{Kind: opPutInode, Path: p, Inode: &w})
	if ino.Type == store.TypeDir {
		var ents []rpc.DirEntry
		after := ""
		for {
			page, more, err := n.st.ReadDir(ctx, p, after, 1024)
			if err != nil {
				return fail(err)
			}
			for _, e := range page {
				ents = append(ents, wireEntry(e))
			}
			if len(ents) > MaxDrainEntries {
				return fail(fmt.Errorf("%w: directory %s has more than %d entries", rpc.ErrUnavailable, p, MaxDrainEntries))
			}
			if !more || len(page) == 0 {
				break
			}
			after = page[len(page)-1].Name
		}
		if len(ents) > 0 {
			plan.add(target, n.id, nil, txnOp{Kind: opPutDir, Path: p, Entries: ents})
		}
	}
	if p == "/" {
		plan.local = func(b *store.Batch) { b.SetMeta(metaRootMoved, []byte(target)) }
	} else {
		dir, name := splitPath(p)
		pl, err := n.locate(ctx, dir, false)
		if err != nil {
			return fail(err)
		}
		ent := rpc.DirEntry{Name: name, Type: typ, Home: target}
		if pl.home == n.id {
			plan.local = func(b *store.Batch) {
				b.RequireEntryExists(dir, name)
				b.PutEntry(dir, storeEntry(&ent))
			}
		} else {
			plan.add(pl.home, n.id, []string{p}, txnOp{Kind: opPutEntry, Path: dir, Entry: &ent, ExpectHome: n.id, ExpectType: typ})
		}
	}
	if _, err := n.finishTxn(ctx, t, plan); err != nil {
		return "", err
	}
	return target, nil
}

func isNotFoundOrBusy(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, errBusy)
}
