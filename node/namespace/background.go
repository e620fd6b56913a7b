package namespace

import (
	"time"

	"github.com/ghba/ghba/routing"
)

// The namespace's background work, started by Start and ended by Stop:
//
//   - filterLoop keeps the filter arrays in line with the Directory and
//     the shards this node leads (syncPeers) and pushes the filter changes
//     of the shards it leads (propagate);
//   - maintainLoop, started by filterLoop, polls the loads of the other
//     nodes' shards (balanced placement), refreshes the other groups'
//     IDBFAs and renews the extra replicas of the memory budget
//     (budget.go), in its own goroutine so that a slow peer never delays
//     propagation.
//
// Each home runs its own: resolving the shard's transactions and deleting
// the records of delivered ones (home.go, txn.go).

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
		case <-n.prop.wake:
			n.syncPeers(false)
		case now := <-t.C:
			if n.peers.Load() != n.prop.snapshot {
				n.syncPeers(false)
			} else if now.Sub(lastCheck) >= n.tune.PeerCheckInterval {
				// A safety net for a missed notification.
				lastCheck = now
				if !samePeers(n.prop.snapshot, n.dir.Peers(), n.dir.Shards(), n.dir.RootShard(), n.currentHeldKey()) {
					n.syncPeers(false)
				}
			}
			n.propagate(false)
		}
	}
}

// signalSync asks filterLoop to sync soon (coalesced).
func (n *Namespace) signalSync() {
	select {
	case n.prop.wake <- struct{}{}:
	default:
	}
}

// maintainLoop runs until Stop.
func (n *Namespace) maintainLoop() {
	n.pollLoads(n.ctx)
	loads := time.NewTicker(n.rt.PropagateInterval)
	defer loads.Stop()
	idb := time.NewTicker(min(n.rt.PropagateInterval, n.tune.PeerCheckInterval))
	defer idb.Stop()
	renew := time.NewTicker(n.renewEvery())
	defer renew.Stop()
	leases := time.NewTicker(time.Second)
	defer leases.Stop()
	n.syncHolders()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-leases.C:
			n.leases.sweep(now)
		case <-loads.C:
			n.pollLoads(n.ctx)
		case <-idb.C:
			n.syncHolders()
		case <-renew.C:
			n.renewExtras(n.ctx)
		}
	}
}

// syncPeers brings the filter arrays in line with the Directory and the
// shards this node leads: a new shard gets an (empty, then pulled)
// replica, a gone one or one this node now leads is removed, a shard whose
// leader changed is reset and pulled again; the shards this node leads
// send their full filters to nodes that came up.
func (n *Namespace) syncPeers(first bool) {
	ps := n.refreshPeers()
	type pull struct {
		origin string
		kinds  [2]bool
	}
	var pulls []pull
	n.arrMu.Lock()
	n.prop.mu.Lock()
	for _, s := range ps.shards {
		if n.leads(s.ID) {
			continue
		}
		var want [2]bool
		if !n.l1.Has(s.ID) {
			_ = n.l1.Add(s.ID, routing.NewFilter(n.l1.Geometry()))
			want[kindLRU] = true
		}
		if n.wantsReplica(ps, s.ID) && !n.l2.Has(s.ID) {
			_ = n.l2.Add(s.ID, routing.NewFilter(n.l2.Geometry()))
			n.prop.loaded.Delete(s.ID)
			want[kindLocal] = true
		}
		if last, seen := n.prop.lastLeader[s.ID]; seen && last != s.Leader && s.Leader != "" {
			// A new leader: its filter versions start afresh, so start the
			// replicas afresh before pulling them.
			_ = n.l1.Replace(s.ID, routing.NewFilter(n.l1.Geometry()))
			want[kindLRU] = true
			if n.l2.Has(s.ID) {
				_ = n.l2.Replace(s.ID, routing.NewFilter(n.l2.Geometry()))
				n.prop.loaded.Delete(s.ID)
				n.prop.terms.Delete(s.ID)
				want[kindLocal] = true
			}
		}
		if s.Leader != "" {
			n.prop.lastLeader[s.ID] = s.Leader
		}
		if (want[0] || want[1] || first) && s.Leader != "" && n.isUp(s.Leader) {
			if first {
				want = [2]bool{n.l2.Has(s.ID), true}
			}
			pulls = append(pulls, pull{s.ID, want})
		}
	}
	for _, id := range n.l1.IDs() {
		if ps.shard[id] == nil || n.leads(id) {
			_ = n.l1.Remove(id)
		}
	}
	for _, id := range n.l2.IDs() {
		if !n.wantsReplica(ps, id) {
			_ = n.l2.Remove(id)
			n.prop.loaded.Delete(id)
			n.prop.terms.Delete(id)
		}
	}
	for id := range n.prop.lastLeader {
		if ps.shard[id] == nil {
			delete(n.prop.lastLeader, id)
		}
	}
	var cameUp []string
	for _, p := range ps.list {
		if p.ID != n.id && p.Up && (first || !n.prop.seenUp[p.ID]) {
			cameUp = append(cameUp, p.ID)
		}
		n.prop.seenUp[p.ID] = p.Up
	}
	for id := range n.prop.seenUp {
		if ps.byID[id] == nil {
			delete(n.prop.seenUp, id)
		}
	}
	n.prop.snapshot = ps
	n.prop.mu.Unlock()
	n.arrMu.Unlock()
	for _, h := range n.ledHomes() {
		for _, id := range cameUp {
			h.needFullTo(id)
		}
	}
	for _, p := range pulls {
		if p.kinds[kindLocal] {
			n.pullAsync(p.origin, kindLocal)
		}
		if p.kinds[kindLRU] {
			n.pullAsync(p.origin, kindLRU)
		}
	}
	if len(pulls) > 0 || len(cameUp) > 0 {
		n.propagate(true)
	}
}
