package namespace

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ghba/ghba/routing"
)

// Replicas by memory budget (docs/design.md, "Filters").
//
// G-HBA (§2.2) gives each node the replicas of its segment only, about
// (N−M')/M' of the N local filters, and sends every lookup the segment
// cannot answer to the group multicast (L3): at N ≤ M one group, two
// lookups in three. A node whose memory allows more holds more: with a
// budget (Options.FilterMemory, config filter_memory) its L2 array holds,
// besides its segment, its group-mates' filters first and then other
// shards' in an order of its own (a rendezvous hash of node and shard, so
// the extra replicas of one shard spread over the holders), as many as the
// array's memory (routing.ArrayBytes) allows. With a budget for every
// other shard a node routes like HBA (L2 resolves about (N−1)/N lookups in
// one hop); with none, like the paper's G-HBA.
//
// The segment's holders are found by the origin through the IDBFAs; the
// extra holders are not, so they subscribe: a pull of a local filter names
// its holder, and the shard's leader pushes the filter's changes to every
// node that pulled it until the node answers NotHolder or stops renewing.
// A holder renews each extra replica every renewEvery with a pull that
// carries its replica's leadership term and version; the leader answers
// "unchanged" when they are current, else the full filter, so a replica
// that missed a new leadership or a push heals within renewEvery.

// renewEvery returns how often a holder renews its extra replicas, and
// subscriptionTTL how long a leader keeps pushing to a holder that stopped
// renewing.
func (n *Namespace) renewEvery() time.Duration { return 5 * n.rt.PropagateInterval }

func (n *Namespace) subscriptionTTL() time.Duration { return 3 * n.renewEvery() }

// extraReplicas returns the shards whose local filters this node holds
// beyond its segment ps.held, within its memory budget: its group-mates'
// (by id), then the other shards' by a rendezvous hash of this node and
// the shard. A shard named after this node (usually led here) is left out.
func (n *Namespace) extraReplicas(ps *peerSet) map[string]bool {
	if n.filterMemory <= 0 {
		return nil
	}
	slots := routing.ArrayMembers(n.localGeo, n.filterMemory, len(ps.shards)) - len(ps.held)
	if slots <= 0 {
		return nil
	}
	my := n.dir.Self().Group
	type cand struct {
		id   string
		mate bool
		rank uint64
	}
	var cands []cand
	for _, s := range ps.shards {
		if s.ID == n.id || ps.held[s.ID] {
			continue
		}
		cands = append(cands, cand{id: s.ID, mate: my != "" && s.Group == my, rank: xxhash.Sum64String(n.id + "\x00" + s.ID)})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		switch {
		case a.mate != b.mate:
			if a.mate {
				return -1
			}
			return 1
		case a.mate:
			return cmp.Compare(a.id, b.id)
		}
		return cmp.Compare(b.rank, a.rank)
	})
	out := make(map[string]bool, min(slots, len(cands)))
	for _, c := range cands[:min(slots, len(cands))] {
		out[c.id] = true
	}
	return out
}

// subscribe records node as a holder of this shard's local filter, to
// which propagate pushes its changes.
func (h *home) subscribe(node string) {
	h.push.mu.Lock()
	h.push.subs[node] = time.Now()
	h.push.mu.Unlock()
}

// unsubscribe forgets node as a holder of this shard's local filter.
func (h *home) unsubscribe(node string) {
	h.push.mu.Lock()
	delete(h.push.subs, node)
	h.push.mu.Unlock()
}

// withSubscribers returns holders and the live subscribers of this shard's
// local filter that holders does not name; it forgets subscriptions not
// renewed within subscriptionTTL and those of nodes gone from the cluster.
func (h *home) withSubscribers(ps *peerSet, holders []Peer) []Peer {
	n := h.r
	expired := time.Now().Add(-n.subscriptionTTL())
	h.push.mu.Lock()
	defer h.push.mu.Unlock()
	for id, at := range h.push.subs {
		p := ps.byID[id]
		switch {
		case p == nil || at.Before(expired):
			delete(h.push.subs, id)
		case p.Up && p.RPCAddr != "" && p.ID != n.id && !slices.ContainsFunc(holders, func(q Peer) bool { return q.ID == id }):
			holders = append(holders, *p)
		}
	}
	return holders
}

// renewExtras renews this node's subscription to every extra replica it
// holds (a few at a time) and replaces a replica that is not current.
func (n *Namespace) renewExtras(ctx context.Context) {
	ps := n.peers.Load()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for id := range ps.extra {
		if n.leads(id) || !n.shardUp(id) {
			continue
		}
		if _, ok := n.prop.loaded.Load(id); !ok {
			n.pullAsync(id, kindLocal) // not loaded yet: a full pull subscribes too
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, n.tune.PullTimeout)
			defer cancel()
			if err := n.renew(cctx, id); err != nil {
				n.log.Debug("filter renewal failed", "origin", id, "err", err)
			}
		})
	}
	wg.Wait()
}

// renew renews the subscription to origin's local filter and replaces the
// replica when the leader says it is not current.
func (n *Namespace) renew(ctx context.Context, origin string) error {
	n.arrMu.RLock()
	ver, ok := n.l2.Version(origin)
	n.arrMu.RUnlock()
	if !ok {
		return nil
	}
	term, _ := n.prop.terms.Load(origin)
	t, _ := term.(uint64)
	req := &filterPullReq{shardReq: to(origin), Kind: kindNames[kindLocal], Holder: n.id, Renew: true, HaveTerm: t, HaveVersion: ver}
	resp, err := callShard(ctx, n, origin, methodFilterPull, req, (*home).handleFilterPull)
	if err != nil || resp.Unchanged {
		return err
	}
	n.counters.pullsSent.Add(1)
	return n.storePulled(origin, kindLocal, resp)
}
