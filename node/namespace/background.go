package namespace

import (
	"context"
	"time"

	"github.com/ghba/ghba/routing"
)

// The namespace's background work, started by Start and ended by Stop:
//
//   - filterLoop keeps the filter arrays in line with the Directory
//     (syncPeers) and pushes this node's filter changes (propagate);
//   - maintainLoop, started by filterLoop, polls the other nodes' loads (balanced placement),
//     resolves transactions and refreshes the other groups' IDBFAs, in its
//     own goroutine so that a slow peer never delays propagation;
//   - cleanupLoop deletes coordinator records of delivered transactions
//     (txn.go).

// filterLoop runs until Stop.
func (n *Namespace) filterLoop() {
	sub, unsub := n.dir.Subscribe()
	defer unsub()
	tick := min(n.rt.PropagateInterval/4, 100*time.Millisecond)
	tick = max(tick, 5*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	n.syncPeers(true)
	n.tasks.Go(n.maintainLoop) // after the first sync: the peers are known
	lastCheck := time.Now()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-sub:
			n.syncPeers(false)
		case now := <-t.C:
			if n.peers.Load() != n.prop.snapshot {
				n.syncPeers(false)
			} else if now.Sub(lastCheck) >= n.tune.PeerCheckInterval {
				// A safety net for a missed notification.
				lastCheck = now
				if !samePeers(n.prop.snapshot, n.dir.Peers(), n.dir.RootHome(), n.currentHeldKey()) {
					n.syncPeers(false)
				}
			}
			n.propagate(false)
		}
	}
}

// maintainLoop runs until Stop.
func (n *Namespace) maintainLoop() {
	n.pollLoads(n.ctx)
	loads := time.NewTicker(n.rt.PropagateInterval)
	defer loads.Stop()
	resolve := time.NewTicker(n.tune.ResolveInterval)
	defer resolve.Stop()
	idb := time.NewTicker(min(n.rt.PropagateInterval, n.tune.PeerCheckInterval))
	defer idb.Stop()
	n.syncHolders()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-loads.C:
			n.pollLoads(n.ctx)
		case <-resolve.C:
			n.resolveTxns(n.ctx)
		case <-idb.C:
			n.syncHolders()
		}
	}
}

// syncPeers brings the filter arrays in line with the Directory: new
// nodes get an (empty, then pulled) replica, departed ones are removed,
// nodes that came up are pulled from and sent full filters.
func (n *Namespace) syncPeers(first bool) {
	ps := n.refreshPeers()
	n.rootOverride.Store(nil)
	var fresh, returned []string
	added := map[string][2]bool{}
	n.arrMu.Lock()
	for _, p := range ps.list {
		if p.ID == n.id {
			continue
		}
		a := added[p.ID]
		if !n.l1.Has(p.ID) {
			_ = n.l1.Add(p.ID, routing.NewFilter(n.l1.Geometry()))
			a[kindLRU] = true
		}
		if n.wantsReplica(ps, p.ID) && !n.l2.Has(p.ID) {
			_ = n.l2.Add(p.ID, routing.NewFilter(n.l2.Geometry()))
			n.prop.loaded.Delete(p.ID)
			a[kindLocal] = true
		}
		if a[kindLRU] || a[kindLocal] {
			added[p.ID] = a
		}
	}
	for _, id := range n.l1.IDs() {
		if ps.byID[id] == nil {
			_ = n.l1.Remove(id)
		}
	}
	for _, id := range n.l2.IDs() {
		if !n.wantsReplica(ps, id) {
			_ = n.l2.Remove(id)
			n.prop.loaded.Delete(id)
		}
	}
	n.arrMu.Unlock()
	pulls := map[string][2]bool{}
	n.prop.mu.Lock()
	for _, p := range ps.list {
		if p.ID == n.id {
			continue
		}
		if p.Up && (first || !n.prop.seenUp[p.ID]) {
			fresh = append(fresh, p.ID)
			pulls[p.ID] = [2]bool{n.wantsReplica(ps, p.ID), true}
			n.prop.needFull[p.ID] = [2]bool{true, true}
			if _, isNew := added[p.ID]; !first && !isNew {
				returned = append(returned, p.ID)
			}
		} else if a, ok := added[p.ID]; p.Up && ok {
			fresh = append(fresh, p.ID) // a replica to fill
			pulls[p.ID] = a
		}
		n.prop.seenUp[p.ID] = p.Up
	}
	for id := range n.prop.seenUp {
		if ps.byID[id] == nil {
			delete(n.prop.seenUp, id)
			delete(n.prop.needFull, id)
		}
	}
	n.prop.snapshot = ps
	n.prop.mu.Unlock()
	if len(returned) > 0 {
		// A node that comes back may have restarted (its versions start
		// again): start its replicas afresh before pulling them.
		n.arrMu.Lock()
		for _, id := range returned {
			_ = n.l1.Replace(id, routing.NewFilter(n.l1.Geometry()))
			if n.l2.Has(id) {
				_ = n.l2.Replace(id, routing.NewFilter(n.l2.Geometry()))
				n.prop.loaded.Delete(id)
			}
		}
		n.arrMu.Unlock()
	}
	if ps.root == n.id && !first {
		// This node became the root's home after Start.
		ctx, cancel := context.WithTimeout(n.ctx, n.tune.RootTimeout)
		if err := n.ensureRoot(ctx); err != nil {
			n.log.Warn("creating /", "err", err)
		}
		cancel()
	}
	for _, id := range fresh {
		if pulls[id][kindLocal] {
			n.pullAsync(id, kindLocal)
		}
		if pulls[id][kindLRU] {
			n.pullAsync(id, kindLRU)
		}
	}
	if len(fresh) > 0 {
		n.propagate(true)
	}
}
